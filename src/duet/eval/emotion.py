"""duet's emotion (speaking-style) classifier on prosodic features, and an E-Sim stand-in built on it.

The Luna report scores emotion with E-Sim, the cosine between emotion2vec embeddings of the reference and the
output. No emotion2vec model ships in an offline wheel, so duet trains its own small one: multinomial logistic
regression (softmax, L2 penalty, full-batch gradient descent with a fixed step on standardised features) over ``duet.eval.prosody.FEATURES``, trained on the labelled styles of an expressive corpus
(``duet data build --preset expressive``; the manifest's ``emotion``). What it learns is what those styles change:
pitch, range, loudness, rate, tilt, voicing. Its E-Sim stand-in is the cosine between the class-probability vectors
of two utterances (:func:`emotion_similarity`).

Saved as one JSON file (labels, feature names, standardisation, weights): nothing is pickled.

Shape legend: N utterances, K features, C classes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from duet.errors import DuetError
from duet.eval.prosody import FEATURES


@dataclass(frozen=True)
class ClassifierConfig:
    l2: float = 1e-3  # on the weights (not the biases), per utterance
    steps: int = 3000
    lr: float = 0.5


def _softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


@dataclass(frozen=True)
class EmotionClassifier:
    labels: tuple[str, ...]  # (C,)
    features: tuple[str, ...]  # (K,)
    mean: np.ndarray  # (K,)
    scale: np.ndarray  # (K,)
    weights: np.ndarray  # (K, C)
    bias: np.ndarray  # (C,)

    @classmethod
    def fit(cls, x: np.ndarray, labels: list[str], config: ClassifierConfig = ClassifierConfig(),
            features: tuple[str, ...] = FEATURES) -> EmotionClassifier:
        """x (N, K) features, one label per row."""
        names = tuple(sorted(set(labels)))
        if len(names) < 2:
            raise DuetError(f"an emotion classifier needs at least two labels, got {names}")
        x = np.asarray(x, dtype=np.float64)
        mean, scale = x.mean(axis=0), x.std(axis=0)
        scale = np.where(scale > 1e-9, scale, 1.0)
        z = (x - mean) / scale  # (N, K)
        y = np.zeros((len(x), len(names)))
        y[np.arange(len(x)), [names.index(label) for label in labels]] = 1.0  # (N, C) one-hot
        w, b = np.zeros((x.shape[1], len(names))), np.zeros(len(names))
        for _ in range(config.steps):  # the loss is convex: plain gradient descent reaches its optimum
            p = _softmax(z @ w + b)
            grad = (p - y) / len(x)
            w -= config.lr * (z.T @ grad + config.l2 * w)
            b -= config.lr * grad.sum(axis=0)
        return cls(names, tuple(features), mean, scale, w, b)

    def proba(self, x: np.ndarray) -> np.ndarray:
        """(N, K) -> (N, C) class probabilities."""
        z = (np.atleast_2d(np.asarray(x, dtype=np.float64)) - self.mean) / self.scale
        return _softmax(z @ self.weights + self.bias)

    def predict(self, x: np.ndarray) -> list[str]:
        return [self.labels[i] for i in self.proba(x).argmax(axis=1)]

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        payload = {"kind": "duet-emotion-classifier", "labels": list(self.labels), "features": list(self.features),
                   "mean": self.mean.tolist(), "scale": self.scale.tolist(), "weights": self.weights.tolist(),
                   "bias": self.bias.tolist()}
        path.write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
        return path

    @classmethod
    def load(cls, path: str | Path) -> EmotionClassifier:
        try:
            d = json.loads(Path(path).read_text(encoding="utf-8"))
            if d.get("kind") != "duet-emotion-classifier":
                raise ValueError("not a duet emotion classifier")
            out = cls(tuple(d["labels"]), tuple(d["features"]), np.array(d["mean"]), np.array(d["scale"]),
                      np.array(d["weights"]), np.array(d["bias"]))
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise DuetError(f"unreadable emotion classifier {path}: {err}") from err
        if out.features != FEATURES:
            raise DuetError(f"{path} was trained on other features ({', '.join(out.features)})")
        return out


@dataclass(frozen=True)
class Accuracy:
    overall: float
    per_label: dict[str, tuple[int, int]]  # label -> (correct, total)
    confusion: dict[str, dict[str, int]]  # true label -> predicted label -> count


def accuracy(truth: list[str], predicted: list[str]) -> Accuracy:
    per: dict[str, list[int]] = {}
    confusion: dict[str, dict[str, int]] = {}
    for t, p in zip(truth, predicted, strict=True):
        row = per.setdefault(t, [0, 0])
        row[0] += t == p
        row[1] += 1
        confusion.setdefault(t, {}).setdefault(p, 0)
        confusion[t][p] += 1
    correct = sum(c for c, _ in per.values())
    return Accuracy(correct / max(len(truth), 1), {k: (c, n) for k, (c, n) in sorted(per.items())}, confusion)


def emotion_similarity(p: np.ndarray, q: np.ndarray) -> float:
    """E-Sim stand-in: cosine between two utterances' class-probability vectors (C,)."""
    p, q = np.asarray(p, dtype=np.float64).ravel(), np.asarray(q, dtype=np.float64).ravel()
    return float(p @ q / max(np.linalg.norm(p) * np.linalg.norm(q), 1e-12))
