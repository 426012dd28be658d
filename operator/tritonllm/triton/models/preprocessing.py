"""Triton Python model `preprocessing`: prompt text to the token tensors tensorrt_llm takes.

Written for tritonllm (rendered into every engine-runtime model repository). It honours the tensor
contract of the config.pbtxt it is deployed with, which differs between TensorRT-LLM versions
(dims [-1] or [1], DECODER_QUERY and PROMPT_TABLE_EXTRA_ID only in later ones): it reads inputs by
name when present and returns exactly the outputs the config declares, in their declared types.

Parameters (config.pbtxt): tokenizer_dir (required), add_special_tokens (default true),
trust_remote_code (default false). Optional inputs fall back as the reference describes: END_ID
and PAD_ID to the tokenizer's eos and pad ids (pad falls back to eos), absent word lists to empty
[2, 0] lists, absent embedding bias to an empty tensor.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils
from transformers import AutoTokenizer


def _parameter(config: dict[str, Any], key: str) -> str:
    return str(config.get("parameters", {}).get(key, {}).get("string_value", "")).strip()


def _flag(config: dict[str, Any], key: str, default: bool) -> bool:
    value = _parameter(config, key).lower()
    return default if not value else value in ("true", "1", "yes")


def _text(value: object) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        tokenizer_dir = _parameter(config, "tokenizer_dir")
        if not tokenizer_dir:
            raise ValueError("preprocessing: parameter tokenizer_dir is required")
        self.add_special_tokens = _flag(config, "add_special_tokens", True)
        self.tokenizer = AutoTokenizer.from_pretrained(
            tokenizer_dir, legacy=False, trust_remote_code=_flag(config, "trust_remote_code", False)
        )
        self.end_id = self.tokenizer.eos_token_id
        pad = self.tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else self.end_id
        self.outputs = {
            out["name"]: pb_utils.triton_string_to_numpy(out["data_type"])
            for out in config["output"]
        }

    def execute(self, requests: list[Any]) -> list[Any]:
        responses = []
        for request in requests:
            try:
                produced = self._process(request)
                tensors = [
                    pb_utils.Tensor(name, np.asarray(value).astype(self.outputs[name]))
                    for name, value in produced.items()
                    if name in self.outputs
                ]
                responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
            except Exception as exc:  # reported to the client as this request's error
                responses.append(
                    pb_utils.InferenceResponse(error=pb_utils.TritonError(f"preprocessing: {exc}"))
                )
        return responses

    def _process(self, request: Any) -> dict[str, np.ndarray]:
        def get(name: str) -> np.ndarray | None:
            tensor = pb_utils.get_input_tensor_by_name(request, name)
            return None if tensor is None else tensor.as_numpy()

        query, output_len = get("QUERY"), get("REQUEST_OUTPUT_LEN")
        if query is None or output_len is None:
            raise ValueError("inputs QUERY and REQUEST_OUTPUT_LEN are required")
        batch = query.shape[0]
        end_id = self._ids(get("END_ID"), self.end_id, batch, "END_ID")
        pad_id = self._ids(get("PAD_ID"), self.pad_id, batch, "PAD_ID")

        input_ids, input_lengths = self._tokenize(query, pad_id)
        out: dict[str, np.ndarray] = {
            "INPUT_ID": input_ids,
            "REQUEST_INPUT_LEN": input_lengths,
            "REQUEST_OUTPUT_LEN": output_len,
            "BAD_WORDS_IDS": self._word_lists(get("BAD_WORDS_DICT"), batch),
            "STOP_WORDS_IDS": self._word_lists(get("STOP_WORDS_DICT"), batch),
            "EMBEDDING_BIAS": self._embedding_bias(
                get("EMBEDDING_BIAS_WORDS"), get("EMBEDDING_BIAS_WEIGHTS"), batch
            ),
            "OUT_END_ID": end_id,
            "OUT_PAD_ID": pad_id,
        }
        decoder_query = get("DECODER_QUERY")
        if decoder_query is not None:
            out["DECODER_INPUT_ID"], out["REQUEST_DECODER_INPUT_LEN"] = self._tokenize(
                decoder_query, pad_id
            )
        else:  # decoder-only models: one pad token, as the backend expects
            out["DECODER_INPUT_ID"] = pad_id.reshape(batch, 1)
            out["REQUEST_DECODER_INPUT_LEN"] = np.ones((batch, 1), np.int32)
        extra_id = get("PROMPT_TABLE_EXTRA_ID")
        if extra_id is not None:  # one p-tuning table id per prompt token
            out["OUT_PROMPT_TABLE_EXTRA_IDS"] = np.repeat(
                extra_id.reshape(batch, 1), input_ids.shape[1], axis=1
            )
        return out

    @staticmethod
    def _ids(given: np.ndarray | None, default: int | None, batch: int, name: str) -> np.ndarray:
        if given is not None:
            return given.reshape(batch, 1).astype(np.int32)
        if default is None:
            raise ValueError(f"the tokenizer has no such token; send {name}")
        return np.full((batch, 1), default, np.int32)

    def _tokenize(self, texts: np.ndarray, pad_id: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Token ids of each row's first string, right-padded with that row's pad id."""
        rows = [
            self.tokenizer.encode(_text(row.reshape(-1)[0]),
                                  add_special_tokens=self.add_special_tokens)
            for row in texts
        ]
        width = max(len(r) for r in rows)
        ids = np.stack([
            np.concatenate([np.asarray(r, np.int32),
                            np.full(width - len(r), pad_id[i, 0], np.int32)])
            for i, r in enumerate(rows)
        ])
        return ids, np.array([[len(r)] for r in rows], np.int32)

    def _word_lists(self, words: np.ndarray | None, batch: int) -> np.ndarray:
        """Each row's words as TensorRT-LLM's [2, N] list: token ids, then cumulative ends.

        Row 0 holds the concatenated ids of every word (padded with 0), row 1 the offset where
        each word ends (padded with -1); rows are padded to the longest, at least 1 wide.
        """
        if words is None:
            return np.zeros((batch, 2, 0), np.int32)
        lists = []
        for row in words:
            ids: list[int] = []
            ends: list[int] = []
            for word in row.reshape(-1):
                tokens = self.tokenizer.encode(_text(word), add_special_tokens=False)
                if tokens:
                    ids += tokens
                    ends.append(len(ids))
            lists.append((ids, ends))
        width = max(1, *(len(ids) for ids, _ in lists))
        out = np.zeros((batch, 2, width), np.int32)
        out[:, 1, :] = -1
        for i, (ids, ends) in enumerate(lists):
            out[i, 0, : len(ids)] = ids
            out[i, 1, : len(ends)] = ends
        return out

    def _embedding_bias(
        self, words: np.ndarray | None, weights: np.ndarray | None, batch: int
    ) -> np.ndarray:
        """A vocabulary-sized bias per row: each word's tokens get the word's weight added."""
        if words is None or weights is None:
            return np.zeros((batch, 0), np.float32)
        bias = np.zeros((batch, len(self.tokenizer)), np.float32)
        for i, (row_words, row_weights) in enumerate(zip(words, weights, strict=True)):
            row_words, row_weights = row_words.reshape(-1), row_weights.reshape(-1)
            if len(row_words) != len(row_weights):
                raise ValueError("EMBEDDING_BIAS_WORDS and EMBEDDING_BIAS_WEIGHTS differ in length")
            for word, weight in zip(row_words, row_weights, strict=True):
                for token in self.tokenizer.encode(_text(word), add_special_tokens=False):
                    bias[i, token] += weight
        return bias
