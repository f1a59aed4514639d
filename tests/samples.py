"""Small programs several test files lint: one home for each."""

# AMP001: a backward inside an autocast region (a safe fix moves it out).
FLAGGED = """\
import torch

def train(model, x, optimizer):
    with torch.autocast("cuda"):
        loss = model(x).sum()
        loss.backward()
    optimizer.step()
"""

# AMP003 (with a safe fix) at 9:9 and nothing else.
CLIP = """\
import torch


def train(model, optimizer, loader, scaler):
    for inputs, targets in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(inputs).sum()
        scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
"""
