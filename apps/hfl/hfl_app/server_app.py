"""hfl-ddp: the ServerApp (see :mod:`hfl_app.task` for what it runs)."""

from hfl_app.task import make_apps

app = make_apps().server_app
