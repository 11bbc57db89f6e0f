"""The web console and `tidegate top`: people's view of a Kafka cluster, through Tidegate's
client only (so it works against any Kafka broker).

`data.py`, `txns.py` and `fetch.py` ask the cluster; `browse.py` decodes fetched batches
into marked rows; `params.py` validates request parameters; `render.py` and `pages.py`
build escaped HTML; `web.py` puts the routes on an aiohttp Application (the broker's HTTP
listener or `tidegate console`); `top.py` renders the terminal screen. The page assets
are in `static/` and ship in the wheel.
"""
