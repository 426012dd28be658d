"""Write a tiny deterministic tokenizer (WordLevel, <s> prepended) to the directory argv[1].

Test-only; run by the triton tier inside its pytriton virtual environment (which has tokenizers
and transformers). No download: the vocabulary is below.
"""

import sys

from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

SPECIAL = ["<pad>", "<unk>", "</s>", "<s>"]
WORDS = [
    "hello", "world", "the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "triton",
    "says", "hi",
]

vocab = {token: i for i, token in enumerate(SPECIAL + WORDS)}
tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
tokenizer.post_processor = processors.TemplateProcessing(
    single="<s> $A", special_tokens=[("<s>", vocab["<s>"])]
)
PreTrainedTokenizerFast(
    tokenizer_object=tokenizer, pad_token="<pad>", unk_token="<unk>", eos_token="</s>",
    bos_token="<s>",
).save_pretrained(sys.argv[1])
