"""pma-app: the emulated heterogeneous testbed trained with periodic model averaging (flwr-adaptive)."""
