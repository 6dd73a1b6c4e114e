"""cardflow's common code: event contracts, settings, delivery, embedded servers and the pure scheduling core."""
