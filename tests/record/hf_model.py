"""A small Hugging Face-format Llama model for `weightscope record -- python
-m mlx_lm convert` (tests/plain/record.rs): config.json with Hugging Face's
keys, float32 weights under Hugging Face's names in one safetensors file, and
a word-level tokenizer built with the `tokenizers` package.

Usage: python hf_model.py OUT_DIR
"""

import json
import sys
from pathlib import Path

import mlx.core as mx
from mlx.utils import tree_flatten
from mlx_lm.models import llama
from tokenizers import Tokenizer, models, pre_tokenizers

CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 512,
    "num_hidden_layers": 4,
    "intermediate_size": 1376,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "rms_norm_eps": 1e-5,
    "vocab_size": 4096,
    "max_position_embeddings": 2048,
    "rope_theta": 10000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "float32",
    "bos_token_id": 1,
    "eos_token_id": 2,
}


def main(out):
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    mx.random.seed(3)
    model = llama.Model(llama.ModelArgs.from_dict(CONFIG))
    weights = dict(tree_flatten(model.parameters()))
    mx.save_safetensors(str(out / "model.safetensors"), weights, metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(CONFIG, indent=2))
    words = ["<unk>", "<s>", "</s>"] + [f"w{i}" for i in range(CONFIG["vocab_size"] - 3)]
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": "<s>",
                "eos_token": "</s>",
                "unk_token": "<unk>",
                "model_max_length": 2048,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main(sys.argv[1])
