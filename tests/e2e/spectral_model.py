"""A keyword-spotting-style front end with a spectral step: conv, rfft2 (complex), magnitude and
irfft2, conv. The complex values run on the host as regions; the convolutions on the NPU."""
import torch
from torch import nn


class Spectral(nn.Module):
    def __init__(self):
        super().__init__()
        self.pre = nn.Conv2d(1, 4, 3, padding=1)
        self.post = nn.Conv2d(4, 8, 3, padding=1)
    def forward(self, x):
        y = self.pre(x)
        f = torch.fft.rfft2(y)
        m = f.abs()
        z = torch.fft.irfft2(f * 0.5, s=y.shape[-2:])
        return self.post(torch.relu(z) + m[..., :1].mean())

def make():
    torch.manual_seed(0)
    return Spectral().eval(), (torch.randn(1, 1, 16, 16),)
