"""hfl-ddp: the ClientApp, one silo per SuperNode (see :mod:`hfl_app.task`)."""

from hfl_app.task import make_apps

app = make_apps().client_app
