"""The web console's pages: server-rendered Jinja2 templates over the console's own `/v1` JSON.

`routes.py` holds the page handlers, `templating.py` the Jinja2 environment and its filters,
`charts.py` the plots (matplotlib SVG, text left as text so the browser draws it in any language).
"""
