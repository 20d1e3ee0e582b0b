"""pytorchexample: A Flower / PyTorch app (test stand-in for CIFAR-10: offline, counted, fake clock).

The training set counts its reads and advances a fake CPU clock by ``COST_S`` per sample read, so
that a client's measured CPU time is exactly ``reads × COST_S`` (a power of two: exact floats).
The first ``train`` call in a process also advances it by ``FIRST_CALL_S``, as torch's first-call
set-up does (several virtual clients share one simulation process: only one of them pays it).
"""

import torch
import torch.nn as nn
from torch.utils.data import DataLoader

from flwr_adaptive.devices import DeviceProfile
from flwr_adaptive.energy import EmulatedMeter

COST_S = 2.0 ** -10  # fake CPU seconds per sample read
FIRST_CALL_S = 2.0  # fake CPU seconds of a process's first train() call (one-off start-up)
TRAIN_SIZE = 2000
SLOWDOWNS = (1.0, 1.5, 2.0, 3.0, 4.0, 6.0)  # one emulated device per partition id
PROFILES = tuple(DeviceProfile(f"dev{i}", "x86_64", slowdown=s, active_w=10.0 + i, idle_w=2.0)
                 for i, s in enumerate(SLOWDOWNS))


class FakeCpuClock:
    """Process CPU seconds as the test decides them (advanced only by counted reads)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


CPU_CLOCK = FakeCpuClock()
_STARTED: list[bool] = []  # non-empty once this process has trained


def emulated_meter(context, server_round):
    """The node's emulated device on the fake clock (jitter-free: exact expected values)."""
    return EmulatedMeter(PROFILES[context.node_config["partition-id"]], cpu_clock=CPU_CLOCK)


class Net(nn.Module):
    """A tiny classifier over 4 features."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        return self.fc(x)


class CountingDataset(torch.utils.data.Dataset):
    """Samples {"img", "label"}; every read is counted and costs COST_S on the fake clock."""

    def __init__(self, size, seed):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(size, 4, generator=g)
        self.y = (self.x[:, 0] > 0).long()
        self.reads = 0

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        self.reads += 1
        CPU_CLOCK.now += COST_S
        return {"img": self.x[i], "label": self.y[i]}


def load_data(partition_id: int, num_partitions: int, batch_size: int):
    """Load partition data (offline)."""
    train = CountingDataset(TRAIN_SIZE, seed=partition_id)
    val = torch.utils.data.TensorDataset(torch.randn(64, 4), torch.zeros(64, dtype=torch.long))
    val = [{"img": x, "label": y} for x, y in val]
    trainloader = DataLoader(train, batch_size=batch_size, shuffle=True)
    testloader = DataLoader(val, batch_size=batch_size)
    return trainloader, testloader


def train(net, trainloader, epochs, lr, device):
    """Train the model on the training set."""
    if not _STARTED:  # a fresh process pays the start-up once
        _STARTED.append(True)
        CPU_CLOCK.now += FIRST_CALL_S
    net.to(device)  # move model to GPU if available
    criterion = torch.nn.CrossEntropyLoss().to(device)
    optimizer = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9)
    net.train()
    running_loss = 0.0
    for _ in range(epochs):
        for batch in trainloader:
            images = batch["img"].to(device)
            labels = batch["label"].to(device)
            optimizer.zero_grad()
            loss = criterion(net(images), labels)
            loss.backward()
            optimizer.step()
            running_loss += loss.item()
    avg_trainloss = running_loss / (epochs * len(trainloader))
    return avg_trainloss


def test(net, testloader, device):
    """Validate the model on the test set."""
    net.to(device)
    criterion = torch.nn.CrossEntropyLoss()
    correct, loss = 0, 0.0
    with torch.no_grad():
        for batch in testloader:
            images = batch["img"].to(device)
            labels = batch["label"].to(device)
            outputs = net(images)
            loss += criterion(outputs, labels).item()
            correct += (torch.max(outputs.data, 1)[1] == labels).sum().item()
    accuracy = correct / len(testloader.dataset)
    loss = loss / len(testloader)
    return loss, accuracy
