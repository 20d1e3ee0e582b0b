"""hfl-ddp: hierarchical FL with torch DDP inside every silo (flwr-adaptive)."""
