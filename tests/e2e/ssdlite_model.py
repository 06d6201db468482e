"""SSDlite-style detector (Liu et al. 2016, SSD; Sandler et al. 2018, SSDLite heads): a small
depthwise-separable backbone, per-feature-map class and box heads, and post-processing (box
decoding, score threshold, NMS) that torch.export cannot trace."""
import torch
from torch import nn


def _dw_sep(cin, cout, stride):
    return nn.Sequential(
        nn.Conv2d(cin, cin, 3, stride, 1, groups=cin, bias=False), nn.BatchNorm2d(cin), nn.ReLU6(),
        nn.Conv2d(cin, cout, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU6())


class Head(nn.Module):
    def __init__(self, channels, anchors, classes):
        super().__init__()
        self.classes = classes
        self.cls = nn.ModuleList(nn.Sequential(
            nn.Conv2d(c, c, 3, padding=1, groups=c), nn.ReLU6(), nn.Conv2d(c, anchors * classes, 1))
            for c in channels)
        self.box = nn.ModuleList(nn.Sequential(
            nn.Conv2d(c, c, 3, padding=1, groups=c), nn.ReLU6(), nn.Conv2d(c, anchors * 4, 1))
            for c in channels)

    def forward(self, feats):
        n = feats[0].shape[0]
        cls = [h(f).permute(0, 2, 3, 1).reshape(n, -1, self.classes)
               for h, f in zip(self.cls, feats, strict=True)]
        box = [h(f).permute(0, 2, 3, 1).reshape(n, -1, 4)
               for h, f in zip(self.box, feats, strict=True)]
        return torch.cat(cls, 1), torch.cat(box, 1)


def nms(boxes, scores, iou):
    order = scores.argsort(descending=True)
    keep = []
    while order.numel() > 0:
        i = order[0]
        keep.append(i)
        if order.numel() == 1:
            break
        rest = boxes[order[1:]]
        lt = torch.maximum(boxes[i, :2], rest[:, :2])
        rb = torch.minimum(boxes[i, 2:], rest[:, 2:])
        inter = (rb - lt).clamp(min=0).prod(1)
        area = lambda b: (b[..., 2] - b[..., 0]) * (b[..., 3] - b[..., 1])  # noqa: E731
        order = order[1:][inter / (area(boxes[i]) + area(rest) - inter) <= iou]
    return torch.stack(keep) if keep else torch.zeros(0, dtype=torch.long)


class SSDLite(nn.Module):
    def __init__(self, classes=3, anchors=2):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU6())
        self.stage1 = nn.Sequential(_dw_sep(16, 24, 2), _dw_sep(24, 24, 1))
        self.stage2 = _dw_sep(24, 48, 2)
        self.head = Head((24, 48), anchors, classes)
        self.register_buffer("anchors", torch.rand(anchors * (8 * 8 + 4 * 4), 4))

    def forward(self, x):
        f1 = self.stage1(self.stem(x))
        f2 = self.stage2(f1)
        logits, deltas = self.head([f1, f2])
        boxes = self.anchors + 0.1 * deltas[0]
        scores, labels = logits[0].sigmoid().max(1)
        mask = scores > 0.5
        boxes, scores, labels = boxes[mask], scores[mask], labels[mask]
        keep = nms(boxes, scores, 0.5)
        return boxes[keep], scores[keep], labels[keep]


def make():
    torch.manual_seed(0)
    return SSDLite().eval(), (torch.randn(1, 3, 32, 32),)
