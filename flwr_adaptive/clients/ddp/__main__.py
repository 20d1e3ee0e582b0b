"""``torchrun --nproc-per-node K -m flwr_adaptive.clients.ddp ...``: see :mod:`flwr_adaptive.clients.ddp.run`."""

import logging
import os
import sys

from flwr_adaptive.clients.ddp.run import main

if __name__ == "__main__":
    status = main()
    # Leave without the interpreter's teardown once the rank's work is done (its process group destroyed,
    # its JSON written): with gloo a rank aborted in that teardown now and then ("terminate called without
    # an active exception", exit -6: 3 of 30 runs beside other DDP jobs on 2 cores, after every line of
    # main had run; 0 of 40 leaving this way). An exception in main still exits the usual way.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
