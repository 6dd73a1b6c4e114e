"""Identity: API tokens (schema `identity`), hashed, with roles; see shared/identity.py for the rules."""
