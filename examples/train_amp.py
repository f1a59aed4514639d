"""A small mixed-precision training loop with three classic AMP mistakes (run `amplint check` on it)."""

import torch
from torch import nn


def train(model: nn.Module, loader, epochs: int = 1, device: str = "cuda") -> None:
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    for _ in range(epochs):
        for inputs, targets in loader:
            scaler = torch.amp.GradScaler(device)
            with torch.autocast(device, dtype=torch.float16):
                loss = loss_fn(model(inputs), targets)
                scaler.scale(loss).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
