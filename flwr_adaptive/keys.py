"""The one place where config and metric keys are named.

The strategy sends config keys to clients; clients send metric keys back. Both sides import these
names, docs/keys.md documents them, and nothing else spells them out.
"""

# Server -> client (ConfigRecord / FitIns.config)
QUOTA = "quota"  # int: samples to process this round
ALLOW_CYCLING = "allow-cycling"  # bool: may a quota above the local data size cycle the data
ROUND = "server-round"  # int: the round number
RANK_QUOTAS = "rank-quotas"  # list[int]: per-rank quotas of a silo (HFL-DDP)
DDP_STEPS = "ddp-steps"  # int: optimizer steps of a silo's DDP round, the same on every rank (HFL-DDP)
# int: the round's reference quota (the equal share: budget // nodes trained), sent with scale_batch_size=True
# (with "shrink": max(equal share, the node's quota)); a client reads its quota in batches of
# ceil(B * quota / reference), so it takes the reference's steps
REFERENCE_QUOTA = "reference-quota"

# Client -> server (MetricRecord / FitRes.metrics). Every client sends every key.
NUM_EXAMPLES = "num-examples"  # Flower's aggregation weight key
SAMPLES = "samples"  # int: samples actually processed
TIME_S = "time-s"  # float: seconds of own compute (device time on the virtual clock)
CPU_TIME_S = "cpu-time-s"  # float: process CPU seconds of the training work
WALL_TIME_S = "wall-time-s"  # float: wall seconds of the training work
ENERGY_J = "energy-j"  # float: active joules; -1.0 when unmeasured
DATA_SIZE = "data-size"  # int: local data size (becomes max_quota when data is private)
PARTITION_ID = "partition-id"  # int: stable id of the client across runs
QUOTA_CAPPED = "quota-capped"  # int 0/1: the quota exceeded the local data and was capped
IDLE_W = "idle-w"  # float: the device's idle watts while it waits for others; -1.0 when unknown
VIRTUAL_CLOCK = "virtual-clock"  # int 0/1: TIME_S is emulated device time (virtual clock), not wall
COLD_START = "cold-start"  # int 0/1: the process's first training call (imports, first-call set-up inside)
SETUP_S = "setup-s"  # float: wall seconds of the call beyond its steady training steps (set-up, warm-up); -1.0 unknown
# The local work behind the update (normalised aggregation, flwr_adaptive.normalized_averaging)
LOCAL_STEPS = "local-steps"  # int: optimizer steps taken this round; -1 when unknown
LOCAL_MOMENTUM = "local-momentum"  # float: momentum of the local SGD (0.0: none); -1.0 when unknown
LOCAL_LR = "local-lr"  # float: learning rate of the round's last local step; -1.0 when unknown
LOCAL_PROXIMAL_MU = "local-proximal-mu"  # float: the proximal term's mu applied locally (0.0: none); -1.0 unknown

# Silo -> server, per rank of the silo's DDP group, in rank order (HFL-DDP; lists of length k)
RANK_SAMPLES = "rank-samples"  # list[int]: samples each rank processed
RANK_TIME_S = "rank-time-s"  # list[float]: each rank's own compute seconds, waits excluded
RANK_ENERGY_J = "rank-energy-j"  # list[float]: each rank's active joules; -1.0 when unmeasured
RANK_WAIT_S = "rank-wait-s"  # list[float]: each rank's all-reduce seconds (wall clock)
# Optional, reported by the user's train function (not by the wrapper): the mean training loss of
# the round. Oort-like selection (flwr_adaptive.strategies.oort_strategy) uses it as the statistical utility.
TRAIN_LOSS = "train-loss"  # float

# The text every set-up error raised by the client wrapper starts with; the server recognises it in
# an error reply's reason (flwr_adaptive.strategies.setup_check).
SETUP_ERROR_MARK = "flwr-adaptive set-up error:"

UNMEASURED_ENERGY = -1.0
UNKNOWN = -1  # DATA_SIZE / PARTITION_ID / IDLE_W / SETUP_S / LOCAL_* when the client cannot tell

# Every telemetry key a wrapped client adds to its reply (NUM_EXAMPLES only when it is missing).
TELEMETRY_KEYS = (
    SAMPLES,
    TIME_S,
    CPU_TIME_S,
    WALL_TIME_S,
    ENERGY_J,
    DATA_SIZE,
    PARTITION_ID,
    QUOTA_CAPPED,
    IDLE_W,
    VIRTUAL_CLOCK,
    COLD_START,
    SETUP_S,
    LOCAL_STEPS,
    LOCAL_MOMENTUM,
    LOCAL_LR,
    LOCAL_PROXIMAL_MU,
)
# The local-work keys among them (parsed when present: a client without them is weighted by its samples).
LOCAL_WORK_KEYS = (LOCAL_STEPS, LOCAL_MOMENTUM, LOCAL_LR, LOCAL_PROXIMAL_MU)
# Read, never written: the proximal mu Flower's FedProx sends (Message API, then legacy API key).
FEDPROX_MU_KEYS = ("proximal-mu", "proximal_mu")

# Server side: what the adaptive strategies put in the round's aggregated train metrics in place of
# the telemetry keys (which a metric average would mangle: an averaged partition id means nothing).
# The user's own metrics are aggregated by the inner strategy's function, without the telemetry keys.
SAMPLES_TOTAL = "samples-total"  # int: samples processed by the aggregated replies
TIME_S_MAX = "time-s-max"  # float: the slowest aggregated client's TIME_S (the round's makespan)
TIME_S_MEAN = "time-s-mean"  # float: mean TIME_S over the aggregated clients
ENERGY_J_TOTAL = "energy-j-total"  # float: active joules summed; only when every client measured them
CAPPED_CLIENTS = "capped-clients"  # int: aggregated clients whose quota exceeded their local data
COLD_START_CLIENTS = "cold-start-clients"  # int: aggregated clients whose call was their process's first
AGGREGATE_KEYS = (SAMPLES_TOTAL, TIME_S_MAX, TIME_S_MEAN, ENERGY_J_TOTAL, CAPPED_CLIENTS, COLD_START_CLIENTS)

# The per-rank lists a silo client adds to its reply (lists differ in length across silos).
SILO_RANK_KEYS = (RANK_SAMPLES, RANK_TIME_S, RANK_ENERGY_J, RANK_WAIT_S)
