"""pytorchexample's task with label-skewed partitions and one slow node (tests/test_noniid_e2e.py).

Copied over ``pytorchexample/task.py`` of the generated app: the same names and signatures
(``Net``, ``load_data``, ``train``, ``test``, ``CPU_CLOCK``, ``emulated_meter``, ``FIRST_CALL_S``;
``train`` is the template's: SGD with momentum 0.9), other data. Six Gaussian classes in 8
features; partition p holds ``TRAIN_SIZE`` samples, ``SKEW`` of them of class p and the rest
spread evenly over the other classes. Partition 0's device is ``SLOW``× slower than the others.
Every read costs ``COST_S`` on the fake CPU clock, so the emulated devices' times are exact.
"""

import os

import torch
import torch.nn as nn
from torch.utils.data import DataLoader

from flwr_adaptive.devices import DeviceProfile
from flwr_adaptive.energy import EmulatedMeter

COST_S = 2.0 ** -10
FIRST_CALL_S = 2.0
TRAIN_SIZE = 600
CLASSES = 6
FEATURES = 8
SKEW = 0.9
SLOW = 4.0
PROFILES = tuple(DeviceProfile(f"dev{i}", "x86_64", slowdown=SLOW if i == 0 else 1.0, active_w=10.0, idle_w=2.0)
                 for i in range(CLASSES))
MEANS = torch.randn(CLASSES, FEATURES, generator=torch.Generator().manual_seed(1234)) * 1.6
# the template initialises its Net and shuffles unseeded: seed them (NONIID_SEED: the measurement's seeds)
torch.manual_seed(int(os.environ.get("NONIID_SEED", "0")))


class FakeCpuClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


CPU_CLOCK = FakeCpuClock()
_STARTED: list[bool] = []


def emulated_meter(context, server_round):
    return EmulatedMeter(PROFILES[context.node_config["partition-id"]], cpu_clock=CPU_CLOCK)


def labels_of(partition_id: int, size: int) -> torch.Tensor:
    """SKEW of the samples of class ``partition_id``, the rest spread evenly over the others."""
    own = int(round(SKEW * size))
    others = [c for c in range(CLASSES) if c != partition_id]
    rest = torch.tensor([others[i % len(others)] for i in range(size - own)], dtype=torch.long)
    return torch.cat([torch.full((own,), partition_id, dtype=torch.long), rest])


def samples(labels: torch.Tensor, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return MEANS[labels] + torch.randn(len(labels), FEATURES, generator=g)


def holdout(per_class: int = 500):
    """A balanced test set: ``(x, y)``."""
    y = torch.arange(CLASSES).repeat_interleave(per_class)
    return samples(y, seed=99), y


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(FEATURES, CLASSES)

    def forward(self, x):
        return self.fc(x)


class CountingDataset(torch.utils.data.Dataset):
    def __init__(self, partition_id):
        self.y = labels_of(partition_id, TRAIN_SIZE)
        self.x = samples(self.y, seed=partition_id)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        CPU_CLOCK.now += COST_S
        return {"img": self.x[i], "label": self.y[i]}


def load_data(partition_id: int, num_partitions: int, batch_size: int):
    train = CountingDataset(partition_id)
    x, y = holdout(10)
    val = [{"img": a, "label": b} for a, b in zip(x, y)]
    return DataLoader(train, batch_size=batch_size, shuffle=True), DataLoader(val, batch_size=batch_size)


def train(net, trainloader, epochs, lr, device):
    """The template's training loop (SGD, momentum 0.9)."""
    if not _STARTED:
        _STARTED.append(True)
        CPU_CLOCK.now += FIRST_CALL_S
    net.to(device)
    criterion = torch.nn.CrossEntropyLoss().to(device)
    optimizer = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9)
    net.train()
    running_loss = 0.0
    for _ in range(epochs):
        for batch in trainloader:
            optimizer.zero_grad()
            loss = criterion(net(batch["img"].to(device)), batch["label"].to(device))
            loss.backward()
            optimizer.step()
            running_loss += loss.item()
    return running_loss / max(epochs * len(trainloader), 1)


def test(net, testloader, device):
    net.to(device)
    criterion = torch.nn.CrossEntropyLoss()
    correct, loss = 0, 0.0
    with torch.no_grad():
        for batch in testloader:
            outputs = net(batch["img"].to(device))
            loss += criterion(outputs, batch["label"].to(device)).item()
            correct += (torch.max(outputs.data, 1)[1] == batch["label"]).sum().item()
    return loss / len(testloader), correct / len(testloader.dataset)
