"""Tensors as both sides of Triton hold them, and the encodings that travel in them.

``Tensors`` is a request's or a response's tensors by name, as read (the adapters hand the cores this; the
clients read responses into it); ``Outputs`` is tensors being built. TensorRT-LLM's ``[2, L]`` word lists
carry stop and bad words as token ids. Imports only numpy.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

Tensors = Mapping[str, np.ndarray]
Outputs = dict[str, np.ndarray]

# Triton datatype -> the numpy dtype a value is sent in (BYTES: Python bytes in an object array)
NUMPY_OF: dict[str, type[np.generic]] = {"INT32": np.int32, "INT64": np.int64, "UINT64": np.uint64,
                                         "FP32": np.float32, "FP64": np.float64, "BOOL": np.bool_,
                                         "BYTES": np.object_}


def words_to_list(word_ids: list[list[int]]) -> np.ndarray:
    """TensorRT-LLM's ``[2, L]`` word list: row 0 the ids of all words back to back, row 1 the end
    offset of each word, both padded with -1 (row 0 with 0). No words -> ``[[0], [-1]]``."""
    flat = [i for ids in word_ids for i in ids]
    offsets = list(np.cumsum([len(ids) for ids in word_ids])) if word_ids else []
    width = max(1, len(flat))
    out = np.zeros((2, width), dtype=np.int32)
    out[1, :] = -1
    out[0, :len(flat)] = flat
    out[1, :len(offsets)] = offsets
    return out


def list_to_words(array: np.ndarray) -> list[list[int]]:
    """The inverse of :func:`words_to_list` (accepts a leading batch dimension of 1)."""
    array = np.asarray(array).reshape(2, -1) if array.size else np.zeros((2, 0), dtype=np.int32)
    ids, offsets = array[0].tolist(), [o for o in array[1].tolist() if o >= 0]
    words, start = [], 0
    for end in offsets:
        if end > start:
            words.append(ids[start:end])
        start = end
    return words
