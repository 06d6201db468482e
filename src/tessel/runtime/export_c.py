"""`tessel export c model.tsl -o dir/`: a C project that runs one inference of a binary with
libtessel, for firmware engineers to start from.

The folder holds ``<name>_model.h`` (the binary as a const array, the I/O descriptors, the
arena size, the NPU's memory sizes), ``<name>_example.h`` (the example inputs stored in the
binary, or none), ``main.c`` (loads, prepares, copies the example inputs, invokes through the C
NPU model's driver, prints every output value), a ``Makefile`` and a ``CMakeLists.txt``, and
``tessel/``: the runtime's sources (``include/``, ``src/`` the firmware library, ``npu/`` the C
NPU model that stands in for the NPU on a host). docs/runtime.md describes the API and how to
replace the C model by a driver for a real SoC.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tessel.errors import TesselConfigError
from tessel.fileio import write_atomic
from tessel.runtime.cbuild import C_ROOT
from tessel.runtime.cengine import TensorInfo, sim_config
from tessel.runtime.compiled import CompiledModel
from tessel.runtime.reference import stored_reference

C_TYPES = {"int8": "TSL_INT8", "uint8": "TSL_UINT8", "int16": "TSL_INT16", "int32": "TSL_INT32",
           "float16": "TSL_FLOAT16", "float32": "TSL_FLOAT32"}
RUNTIME_FOLDERS = ("include", "src", "npu")
BYTES_PER_LINE = 16


@dataclass(frozen=True)
class Exported:
    """What `export_c` wrote."""

    folder: Path
    name: str
    files: tuple[Path, ...]
    arena_size: int
    example_inputs: bool


def c_name(text: str) -> str:
    """`text` as a C identifier (lower case; a leading digit gets an underscore)."""
    name = re.sub(r"[^0-9a-zA-Z_]", "_", text).lower().strip("_") or "model"
    return f"m_{name}" if name[0].isdigit() else name


def _c_string(text: str) -> str:
    out = []
    for b in text.encode():
        ch = chr(b)
        out.append(ch if 32 <= b < 127 and ch not in '"\\?' else f"\\{b:03o}")
    return '"' + "".join(out) + '"'


def _byte_array(name: str, data: bytes, qualifier: str = "static const") -> str:
    rows = [", ".join(f"0x{b:02x}" for b in data[i:i + BYTES_PER_LINE])
            for i in range(0, len(data), BYTES_PER_LINE)] or ["0x00"]
    body = ",\n    ".join(rows)
    return f"{qualifier} uint8_t {name}[{max(len(data), 1)}] = {{\n    {body}\n}};\n"


def _io_entry(t: TensorInfo) -> str:
    dims = list(t.shape) + [0] * (8 - len(t.shape))
    scale, zp = t.quant if t.quant is not None else (0.0, 0)
    return (f"    {{{_c_string(t.name)}, {C_TYPES[t.dtype.name]}, {len(t.shape)}, "
            f"{{{', '.join(f'{d}u' for d in dims)}}}, {t.nbytes}u, {int(t.quant is not None)}, "
            f"{float(scale)!r}, {int(zp)}}}")


def _sim_memory_size(cfg) -> int:
    """tsl_sim_memory_size (tessel_sim.h) of the NPU configuration."""
    def a16(x: int) -> int:
        return (x + 15) // 16 * 16
    return (a16(cfg.sram_bytes) + a16(cfg.acc_entries * 4) + a16(cfg.lut_entries * 2)
            + a16(cfg.sram_bytes * 4 + 16))


def model_header(cm: CompiledModel, name: str, source: str) -> str:
    """`<name>_model.h`: the binary, the I/O descriptors, the arena and NPU memory sizes."""
    engine = cm.c_engine
    cfg = sim_config(cm.arch)
    up = name.upper()
    sizes = ", ".join(f"{int(cfg.offchip_size[i])}ull" for i in range(cfg.offchip_count)) or "0"
    ios = (f"static const {name}_io {name}_inputs[{max(len(engine.inputs), 1)}] = {{\n"
           + ",\n".join(_io_entry(t) for t in engine.inputs) + "\n};\n"
           f"static const {name}_io {name}_outputs[{max(len(engine.outputs), 1)}] = {{\n"
           + ",\n".join(_io_entry(t) for t in engine.outputs) + "\n};\n")
    return f"""/* {name}: {source} compiled for {cm.arch.name}, as `tessel export c` writes it.
 * The binary (tsl_load validates it), its inputs and outputs as the binary describes them, the
 * arena one inference needs, and the NPU's memory sizes (for the C NPU model). */
#ifndef {up}_MODEL_H
#define {up}_MODEL_H

#include <stdint.h>
#include "tessel/tessel.h"

#define {up}_TSL_SIZE {len(cm.binary)}u
#define {up}_ARENA_SIZE {engine.arena_size}u /* tsl_arena_size() after tsl_load */
#define {up}_INPUT_COUNT {len(engine.inputs)}u
#define {up}_OUTPUT_COUNT {len(engine.outputs)}u

/* the target NPU ({cm.arch.name}): what the C NPU model needs (tsl_sim_config) */
#define {up}_NPU_SRAM_BYTES {int(cfg.sram_bytes)}u
#define {up}_NPU_ACC_ENTRIES {int(cfg.acc_entries)}u
#define {up}_NPU_LUT_ENTRIES {int(cfg.lut_entries)}u
#define {up}_NPU_OFFCHIP_COUNT {int(cfg.offchip_count)}u
#define {up}_NPU_OFFCHIP_SIZES {{{sizes}}}
#define {up}_NPU_WDECODER {int(cfg.wdecoder)}u /* the weight decoder (DMA_LOAD_W) */
#define {up}_NPU_SPARSE {int(cfg.sparse)}u /* 2:4 sparse CONV weights */
#define {up}_NPU_MEMORY_SIZE {_sim_memory_size(cfg)}u /* tsl_sim_memory_size() */

/* a model input or output: real = scale * (q - zero_point) when quantised */
typedef struct {name}_io {{
    const char *name;
    tsl_dtype dtype;
    uint8_t rank;
    uint32_t shape[TSL_MAX_RANK];
    uint64_t nbytes;
    uint8_t quantised;
    double scale;
    int64_t zero_point;
}} {name}_io;

{ios}
/* the .tsl file (keep it readable while the model is used: tsl_load points into it) */
{_byte_array(f"{name}_tsl", cm.binary)}
#endif
"""


def example_header(cm: CompiledModel, name: str) -> tuple[str, bool]:
    """`<name>_example.h`: the example inputs the binary stores (zeros when it stores none)."""
    stored = stored_reference(cm.program.metadata)
    inputs = cm.c_engine.inputs
    arrays = list(stored.inputs) if stored is not None and stored.inputs is not None else None
    up = name.upper()
    parts = [f"/* {name}: the example inputs of the binary (tessel run uses the same). */\n"
             f"#ifndef {up}_EXAMPLE_H\n#define {up}_EXAMPLE_H\n\n#include <stdint.h>\n\n"
             f"#define {up}_HAS_EXAMPLE {int(arrays is not None)}\n"]
    for i, t in enumerate(inputs):
        data = b""
        if arrays is not None:
            data = np.ascontiguousarray(np.asarray(arrays[i]), t.dtype.newbyteorder("<")).tobytes()
            if len(data) != t.nbytes:
                raise TesselConfigError(f"the stored example input {i + 1} has {len(data)} "
                                        f"bytes, the model's input {t.name!r} {t.nbytes}")
        parts.append(_byte_array(f"{name}_example_input_{i}", data or bytes(max(t.nbytes, 1))))
    parts.append(f"static const uint8_t *const {name}_example_inputs[{max(len(inputs), 1)}] = {{"
                 + ", ".join(f"{name}_example_input_{i}" for i in range(len(inputs)))
                 + ("" if inputs else "0") + "};\n\n#endif\n")
    return "\n".join(parts), arrays is not None


def export_c(binary: Path, folder: Path, name: str | None = None) -> Exported:
    """Write the C project of `binary` into `folder` (created; existing files replaced)."""
    from tessel.runtime.compiled import load

    cm = load(binary)
    name = c_name(name or binary.stem)
    folder.mkdir(parents=True, exist_ok=True)
    example, has_example = example_header(cm, name)
    files = {f"{name}_model.h": model_header(cm, name, binary.name),
             f"{name}_example.h": example,
             "main.c": MAIN_C.replace("NAME", name).replace("UPPER", name.upper()),
             "Makefile": MAKEFILE.replace("NAME", name),
             "CMakeLists.txt": CMAKE.replace("NAME", name)}
    written = []
    for file, text in files.items():
        write_atomic(folder / file, text)
        written.append(folder / file)
    runtime = folder / "tessel"
    for sub in RUNTIME_FOLDERS:
        if (runtime / sub).exists():
            shutil.rmtree(runtime / sub)
        shutil.copytree(C_ROOT / sub, runtime / sub)
        written.extend(sorted(p for p in (runtime / sub).rglob("*") if p.is_file()))
    return Exported(folder, name, tuple(written), cm.c_engine.arena_size, has_example)


MAKEFILE = """\
# Builds NAME_demo: one inference of NAME with libtessel on the C NPU model (tessel export c).
CC ?= cc
CFLAGS ?= -std=c99 -O2 -Wall -Wextra -Werror
LIBTESSEL := $(wildcard tessel/src/*.c)
NPU_MODEL := $(wildcard tessel/npu/*.c)

NAME_demo: main.c NAME_model.h NAME_example.h $(LIBTESSEL) $(NPU_MODEL)
\t$(CC) $(CFLAGS) -Itessel/include -I. -o $@ main.c $(LIBTESSEL) $(NPU_MODEL) -lm

run: NAME_demo
\t./NAME_demo

clean:
\trm -f NAME_demo

.PHONY: run clean
"""

CMAKE = """\
# Builds NAME_demo: one inference of NAME with libtessel on the C NPU model (tessel export c).
cmake_minimum_required(VERSION 3.13)
project(NAME_demo C)
set(CMAKE_C_STANDARD 99)
set(CMAKE_C_STANDARD_REQUIRED ON)
set(CMAKE_C_EXTENSIONS OFF)
file(GLOB LIBTESSEL_SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/tessel/src/*.c)
file(GLOB NPU_MODEL_SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/tessel/npu/*.c)
add_library(tessel STATIC ${LIBTESSEL_SOURCES})
target_include_directories(tessel PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/tessel/include)
add_library(tessel_npu_model STATIC ${NPU_MODEL_SOURCES})
target_link_libraries(tessel_npu_model PUBLIC tessel)
add_executable(NAME_demo main.c)
target_link_libraries(NAME_demo PRIVATE tessel_npu_model tessel m)
if(CMAKE_C_COMPILER_ID MATCHES "GNU|Clang")
  target_compile_options(tessel PRIVATE -Wall -Wextra -Werror)
  target_compile_options(tessel_npu_model PRIVATE -Wall -Wextra -Werror)
  target_compile_options(NAME_demo PRIVATE -Wall -Wextra -Werror)
endif()
"""

# main.c, with NAME and UPPER for the model's C name (a template next to the C sources)
MAIN_C = (C_ROOT / "tools" / "export_main.c.in").read_text()
