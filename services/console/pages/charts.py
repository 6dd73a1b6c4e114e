"""The console's plots as inline SVG (matplotlib, server-side; no JavaScript, no CDN).

Text stays text in the SVG (`svg.fonttype = none`), so the browser draws Chinese labels with its
own fonts. Every series has its own marker and line style or hatch, so plots read without colour.

    svg = line_chart(times, {"H100": [...], "L40S": [...]}, y_label="share", percent=True)
    svg = stacked_bars(days, {"proj-a": [...], ...}, y_label="cost")
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from datetime import datetime
from itertools import cycle

import matplotlib

matplotlib.use("Agg")
import matplotlib.dates as mdates  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib import font_manager  # noqa: E402
from matplotlib.ticker import PercentFormatter  # noqa: E402

_STYLES = (("o", "-"), ("s", "--"), ("^", ":"), ("D", "-."), ("v", "-"), ("P", "--"))
_HATCHES = ("", "//", "..", "xx", "\\\\", "++", "oo")
_COLOURS = ("#1f5fa8", "#d9822b", "#2e8540", "#8e44ad", "#b03a2e", "#5d6d7e", "#148f77")
SIZE_IN = (10.0, 2.8)
CJK_FONT_NAMES = ("Noto Sans CJK SC", "Noto Sans CJK JP", "WenQuanYi Zen Hei", "WenQuanYi Micro Hei")
"""CJK fonts to measure Chinese labels with, first found wins (a `.ttc` collection is named by its first
face: Debian's fonts-noto-cjk is "Noto Sans CJK JP" to matplotlib; its Han glyphs are the same width)."""


def _known_fonts() -> set[str]:
    """Font names matplotlib can use, counting CJK files installed after its font cache was built (the
    cache is not rebuilt when fonts are added, so they would stay unknown and Chinese text measured as
    missing glyphs)."""
    known = {font.name for font in font_manager.fontManager.ttflist}
    if not known & set(CJK_FONT_NAMES):
        for path in font_manager.findSystemFonts():
            if any(part in path for part in ("CJK", "wqy")):
                font_manager.fontManager.addfont(path)
        known = {font.name for font in font_manager.fontManager.ttflist}
    return known


_KNOWN = _known_fonts()
_CJK_FONT = next((name for name in CJK_FONT_NAMES if name in _KNOWN), None)
_FONTS = [name for name in (_CJK_FONT, "DejaVu Sans") if name in _KNOWN] or ["sans-serif"]
"""Fonts matplotlib measures text with (a CJK one when installed); the browser draws the text itself."""

NUMERIC_TICKS = ["%Y", "%Y-%m", "%d", "%H:%M", "%H:%M", "%S.%f"]
NUMERIC_ZEROS = ["", "%Y", "%Y-%m", "%m-%d", "%H:%M", "%H:%M"]
NUMERIC_OFFSETS = ["", "%Y", "%Y-%m", "%Y-%m-%d", "%Y-%m-%d", "%Y-%m-%d %H:%M"]
"""Time axis labels in digits only (matplotlib's default names months in English: `2026-Dec-03`),
so they read the same on the Chinese and the English page."""

MIN_BAR_SLOTS = 8
"""A bar chart is laid out for at least this many bars, so a lone bar is not a wall."""


def _figure() -> tuple[plt.Figure, plt.Axes]:
    plt.rcParams.update({"svg.fonttype": "none", "font.size": 10, "font.family": _FONTS})
    figure, axes = plt.subplots(figsize=SIZE_IN, dpi=96, layout="constrained")
    axes.spines[["top", "right"]].set_visible(False)
    axes.grid(axis="y", alpha=0.3)
    return figure, axes


def _svg(figure: plt.Figure) -> str:
    out = io.StringIO()
    figure.savefig(out, format="svg")
    plt.close(figure)
    text = out.getvalue()
    return text[text.index("<svg"):]  # drop the XML prolog and doctype: the SVG is inlined in HTML


def line_chart(times: Sequence[datetime], series: Mapping[str, Sequence[float]], *, y_label: str,
               percent: bool = False, title: str = "") -> str:  # fmt: skip
    """One line per series over `times`."""
    figure, axes = _figure()
    for (name, values), (marker, style), colour in zip(series.items(), cycle(_STYLES), cycle(_COLOURS)):
        axes.plot(times, values, label=name, marker=marker, linestyle=style, color=colour, markersize=4, linewidth=1.6)
    if percent:
        axes.yaxis.set_major_formatter(PercentFormatter(1.0))
        axes.set_ylim(0, 1.05)
    else:
        axes.set_ylim(bottom=0)
    locator = mdates.AutoDateLocator(maxticks=8)
    axes.xaxis.set_major_locator(locator)
    axes.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator, formats=NUMERIC_TICKS,
                                                                 zero_formats=NUMERIC_ZEROS, offset_formats=NUMERIC_OFFSETS))
    return _finish(figure, axes, y_label, title, bool(series))


def _finish(figure: plt.Figure, axes: plt.Axes, y_label: str, title: str, legend: bool) -> str:
    axes.set_ylabel(y_label)
    if title:
        axes.set_title(title, loc="left")
    if legend:
        axes.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    return _svg(figure)


def stacked_bars(labels: Sequence[str], series: Mapping[str, Sequence[float]], *, y_label: str, title: str = "") -> str:
    """Bars per label, each series stacked with its own hatch."""
    figure, axes = _figure()
    bottom = [0.0] * len(labels)
    for (name, values), hatch, colour in zip(series.items(), cycle(_HATCHES), cycle(_COLOURS)):
        axes.bar(labels, values, bottom=bottom, label=name, hatch=hatch, color=colour, edgecolor="white", width=0.6)
        bottom = [b + v for b, v in zip(bottom, values)]
    axes.set_xlim(-0.5, max(len(labels), MIN_BAR_SLOTS) - 0.5)  # one or two bars stay bar-shaped
    return _finish(figure, axes, y_label, title, bool(series))
