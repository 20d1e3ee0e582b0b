"""``torchrun --nproc-per-node K -m flwr_adaptive.clients.ddp ...``: see :mod:`flwr_adaptive.clients.ddp.run`."""

import sys

from flwr_adaptive.clients.ddp.run import main

if __name__ == "__main__":
    sys.exit(main())
