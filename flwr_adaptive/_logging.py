"""The one logger of flwr-adaptive: Flower's own (``"flwr"``).

Our lines land next to Flower's round lines, under the handlers and level a Flower user already
configured (``flwr run``'s stream, ``FLWR_LOG_LEVEL``), and in pytest's ``caplog``. Looked up by
name, so the framework-free core does not import flwr.
"""

import logging

logger = logging.getLogger("flwr")
