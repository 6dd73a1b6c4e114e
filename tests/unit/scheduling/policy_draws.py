"""Hypothesis draws of Policy knobs that several property tests share (the plan properties, the fast paths'
equivalences and the simulator's no-starvation property draw the same rules, so a new rule is drawn by all three)."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st


@st.composite
def standard_yield_knobs(draw: st.DrawFn) -> dict[str, Any]:
    """The rules by which standard work yields to core work (all off in the presets), as `replace` keywords."""
    return dict(
        checkpointing_standard_yields=draw(st.booleans()),
        standard_yields_within_width=draw(st.booleans()),
        standard_yields_priced=draw(st.booleans()),
        standard_yields_drain_priced=draw(st.booleans()),
        standard_yields_drain_kth_hole=draw(st.booleans()),
        standard_yields_restart_after_headroom=draw(st.booleans()),
        standard_yields_restart_after_queue=draw(st.booleans()),
        standard_yields_any_width_after_s=draw(st.sampled_from((None, 0.0, 600.0, 3600.0))),
    )
