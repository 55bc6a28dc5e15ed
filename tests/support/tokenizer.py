"""A small Hugging Face tokenizer built offline, with a ChatML-style chat template, so the
tokenizer path of the Atropos exporter runs on a real `transformers` tokenizer."""

from __future__ import annotations

from pathlib import Path

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
    "{% if m.get('tool_calls') %}{% for c in m['tool_calls'] %}\n<tool_call>"
    "{{ c['function'] | tojson }}</tool_call>{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

_CORPUS = [
    "What is 6*7? Let me check. It is 42. find the answer search calc",
    "You are careful. error: no such tool. I could not. count 1 2 3",
    '<tool_call> </tool_call> <think> </think> {"name": "arguments"}',
]


def build_chat_tokenizer(folder: Path) -> Path:
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(_CORPUS, vocab_size=400, min_frequency=1, show_progress=False)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=bpe._tokenizer,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        additional_special_tokens=["<|im_start|>", "<|im_end|>"],
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(folder))
    return folder
