"""Source locations of exported nodes: the innermost nn.Module path and the user's source line.

The module path is the FQN of the innermost entry of `node.meta["nn_module_stack"]`. The line is
the last frame of `node.meta["stack_trace"]` that is user code, i.e. not inside torch or Tessel's
own internals (the model zoo in `tessel/models/` counts as user code). Paths inside the root
folder are stored relative to it so IR text and binaries do not depend on where the checkout
lives: the root is the working directory for `tessel import`, and the model's own root
(``model_root``) when quantising for a binary, so the same model in two clones at different
paths compiles to the same bytes.
"""

from __future__ import annotations

import functools
import os
import re
import sys
from pathlib import Path

import torch
import torch.fx

from tessel.ir import UNKNOWN_LOC, SourceLoc

_FRAME = re.compile(r'File "([^"]+)", line (\d+)')
_TORCH_DIR = str(Path(torch.__file__).resolve().parent) + os.sep
_TESSEL_DIR = str(Path(__file__).resolve().parents[1]) + os.sep  # the tessel package
_USER_TESSEL_DIRS = (_TESSEL_DIR + "models" + os.sep,)


def is_internal(path: str) -> bool:
    """True for frames that are not user code (torch, Tessel internals, generated code)."""
    if path.startswith("<"):
        return True
    full = _resolved(path) if os.path.isabs(path) else path
    if full.startswith(_TORCH_DIR):
        return True
    return full.startswith(_TESSEL_DIR) and not full.startswith(_USER_TESSEL_DIRS)


def user_frame(stack_trace: str | None) -> tuple[str, int] | None:
    """(file, line) of the last user frame in an fx stack trace, or None."""
    if not stack_trace:
        return None
    frames = [(m.group(1), int(m.group(2))) for m in _FRAME.finditer(stack_trace)]
    for path, line in reversed(frames):
        if not is_internal(path):
            return path, line
    return None


def display_path(path: str, cwd: str) -> str:
    """`path` relative to `cwd` when it lies inside it, else unchanged."""
    try:
        return str(Path(_resolved(path)).relative_to(_resolved(cwd)))
    except (ValueError, OSError):
        return path


def _resolved(path: str) -> str:
    """``Path(path).resolve()`` as text; once per absolute path (every node's stack trace names
    the same few files), a relative one every time (it depends on the working directory)."""
    return _resolved_absolute(path) if os.path.isabs(path) else str(Path(path).resolve())


@functools.lru_cache(maxsize=4096)
def _resolved_absolute(path: str) -> str:
    return str(Path(path).resolve())


def model_root(model: object) -> str | None:
    """The folder that holds the top-level package (or the lone module) defining the class of
    `model`: e.g. `src/` for `tessel.models.ds_cnn`, the file's folder for a user's file.py.
    None when the class has no source file (then locations are relative to the cwd)."""
    name = type(model).__module__
    file = getattr(sys.modules.get(name), "__file__", None)
    if not file:
        return None
    path = Path(file).resolve()
    depth = name.count(".") + (path.name == "__init__.py")
    return str(path.parents[depth]) if depth < len(path.parents) else None


def module_path(node: torch.fx.Node) -> str:
    """FQN of the innermost module on the node's nn_module_stack ('' for the root)."""
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return ""
    fqn = list(stack.values())[-1][0]
    return str(fqn)


def source_loc(node: torch.fx.Node, cwd: str) -> SourceLoc:
    """The SourceLoc of an exported fx node (UNKNOWN_LOC when export recorded nothing)."""
    frame = user_frame(node.meta.get("stack_trace"))
    module = module_path(node)
    if frame is None:
        return SourceLoc(module=module) if module else UNKNOWN_LOC
    return SourceLoc(module=module, file=display_path(frame[0], cwd), line=frame[1])
