"""A small convolutional classifier in the style of PyTorch's MNIST example: Adadelta, StepLR,
a DataLoader with two worker processes, a train and a test loop.  The images are synthetic and
deterministic (each one is made from its index), so the printed losses are the same on every run.

Ground truth: every ``model(data)`` call is one root-module execution, every ``loss.backward()``
one backward, every ``optimizer.step()`` one optimizer step; nothing else calls a module.
"""
import json

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader, Dataset

torch.use_deterministic_algorithms(True)
torch.set_num_threads(1)

# the graphs the runtime should name (README: <ModuleClass>_<hash>, its _bwd, <OptimizerClass>_<hash>)
MODELS = ["Net", "Net_bwd", "Adadelta"]


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, 1)
        self.conv2 = nn.Conv2d(8, 16, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(16 * 4 * 4, 32)
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = self.dropout2(x)
        return F.log_softmax(self.fc2(x), dim=1)


class Shapes(Dataset):
    """12x12 images of one of four patterns plus noise; item ``i`` is always the same image."""

    def __init__(self, n, offset):
        self.n, self.offset = n, offset

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(self.offset + i)
        label = (self.offset + i) % 4
        img = torch.randn(1, 12, 12, generator=g) * 0.3
        if label == 0:
            img[:, 3:9, 3:9] += 1.0
        elif label == 1:
            img[:, :, 5:7] += 1.0
        elif label == 2:
            img[:, 5:7, :] += 1.0
        else:
            img += torch.eye(12).unsqueeze(0)
        return img, label


def train(model, loader, optimizer, epoch, counts):
    model.train()
    for batch_idx, (data, target) in enumerate(loader):
        optimizer.zero_grad()
        output = model(data)
        counts["forward"] += 1
        loss = F.nll_loss(output, target)
        loss.backward()
        counts["backward"] += 1
        optimizer.step()
        counts["optimizer"] += 1
        print(f"Train Epoch: {epoch} [{batch_idx * len(data)}/{len(loader.dataset)}]\tLoss: {loss.item():.6f}")


def test(model, loader, counts):
    model.eval()
    test_loss, correct = 0.0, 0
    with torch.no_grad():
        for data, target in loader:
            output = model(data)
            counts["forward"] += 1
            test_loss += F.nll_loss(output, target, reduction="sum").item()
            correct += output.argmax(dim=1).eq(target).sum().item()
    n = len(loader.dataset)
    print(f"Test set: Average loss: {test_loss / n:.4f}, Accuracy: {correct}/{n}")


def main():
    torch.manual_seed(1)
    counts = {"forward": 0, "backward": 0, "optimizer": 0}
    train_loader = DataLoader(Shapes(64, 0), batch_size=16, shuffle=True, num_workers=2)
    test_loader = DataLoader(Shapes(32, 1000), batch_size=16, num_workers=2)
    model = Net()
    optimizer = torch.optim.Adadelta(model.parameters(), lr=1.0)
    scheduler = StepLR(optimizer, step_size=1, gamma=0.7)
    for epoch in range(1, 3):
        train(model, train_loader, optimizer, epoch, counts)
        test(model, test_loader, counts)
        scheduler.step()
    print("GROUND_TRUTH " + json.dumps({"processes": [dict(key="main", models=MODELS, **counts)]}))


if __name__ == "__main__":
    main()
