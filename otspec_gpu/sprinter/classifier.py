r"""SPRINTER's learned verifier: a classifier of "would the exact rule keep this token for sure".

The score of drafted token :math:`x` at a position with draft hidden state :math:`h`, draft law
:math:`q` and position :math:`t` is

.. math:: s(x) = b + w_1 z(H(q)) + w_2 z(t) + w_3 z(\log q(x)) + w_4 z(q(x)) + g(h),

where :math:`z` standardises with the training set's mean and deviation, and :math:`g` is either 0
(``kind="logreg"``: logistic regression on the cheap features) or a small MLP on the standardised
hidden state (``kind="head"``: one hidden layer of ``units`` ReLU units). The pass probability is
:math:`\sigma(s(x))`; with a decision threshold :math:`\theta` the verifier passes :math:`x` iff
:math:`\sigma(s(x)) \ge \theta`. Only :math:`\log q(x)` and :math:`q(x)` depend on :math:`x`, so
:math:`a(x)` is computed for the whole vocabulary at the cost of two vector operations, which is
what the exact fidelity accounting needs.

Training minimises the binary cross-entropy against SPRINTER's label :math:`1\{q(x) \le p(x)\}`
(or the soft label :math:`\min(1, p/q)`) with full-batch Adam from a seeded initialisation:
the same data and seed give bit-identical weights.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch

from otspec.errors import SprinterInputError
from otspec_gpu.inputs import generators
from otspec_gpu.sprinter.rules import Features, PassRule

__all__ = ["KINDS", "ClassifierVerifier", "ScoreModel", "load_verifier", "metrics", "save_verifier", "train"]

KINDS = ("logreg", "head")
_LOGQ_FLOOR = 1e-30  # log q(x) is floored here: tokens with q(x) = 0 are never drafted and add nothing to the bound


def _cheap(entropy: torch.Tensor, position: torch.Tensor) -> torch.Tensor:
    return torch.stack([entropy.double(), position.double()], -1)


def _tok(q: torch.Tensor) -> torch.Tensor:
    q = q.double()
    return torch.stack([torch.log(q.clamp_min(_LOGQ_FLOOR)), q], -1)


class ScoreModel(torch.nn.Module):
    """The score :math:`s(x)` of the module docstring (float64 parameters).

    Parameters
    ----------
    kind : {"logreg", "head"}
        Linear score on the cheap features, or with the MLP term :math:`g(h)` on the hidden state.
    hidden_size : int
        Width ``H`` of the draft's hidden state.
    units : int
        ReLU units of the head (``kind="head"``).

    Raises
    ------
    SprinterInputError
        If ``kind`` is unknown.
    """

    def __init__(self, kind: str, hidden_size: int, units: int = 32):
        super().__init__()
        if kind not in KINDS:
            raise SprinterInputError(f"kind must be one of {KINDS} (got {kind!r})")
        self.kind, self.hidden_size, self.units = kind, int(hidden_size), int(units)
        self.register_buffer("mu", torch.zeros(4, dtype=torch.float64))
        self.register_buffer("sd", torch.ones(4, dtype=torch.float64))
        self.register_buffer("mu_h", torch.zeros(self.hidden_size, dtype=torch.float64))
        self.register_buffer("sd_h", torch.ones(self.hidden_size, dtype=torch.float64))
        self.w = torch.nn.Parameter(torch.zeros(4, dtype=torch.float64))
        self.b = torch.nn.Parameter(torch.zeros((), dtype=torch.float64))
        if kind == "head":
            self.W1 = torch.nn.Parameter(torch.zeros(self.hidden_size, self.units, dtype=torch.float64))
            self.b1 = torch.nn.Parameter(torch.zeros(self.units, dtype=torch.float64))
            self.w2 = torch.nn.Parameter(torch.zeros(self.units, dtype=torch.float64))

    def init(self, generator: torch.Generator) -> None:
        """Seeded initialisation (zeros for the linear part, scaled Gaussians for the head).

        Parameters
        ----------
        generator : torch.Generator
            Stream of the head's Gaussian weights (:math:`N(0, 1/H)` and :math:`N(0, 1/\\text{units})`).
        """
        with torch.no_grad():
            self.w.zero_()
            self.b.zero_()
            if self.kind == "head":
                self.W1.copy_(torch.randn(self.W1.shape, generator=generator, dtype=torch.float64) / math.sqrt(self.hidden_size))
                self.b1.zero_()
                self.w2.copy_(torch.randn(self.w2.shape, generator=generator, dtype=torch.float64) / math.sqrt(self.units))

    def context_score(self, hidden: torch.Tensor, entropy: torch.Tensor, position: torch.Tensor) -> torch.Tensor:
        """The part of the score that does not depend on the token, ``[R]``.

        Parameters
        ----------
        hidden : torch.Tensor
            ``[R, H]`` draft hidden states.
        entropy : torch.Tensor
            ``[R]`` entropies :math:`H(q)` in nats.
        position : torch.Tensor
            ``[R]`` positions :math:`t`.

        Returns
        -------
        torch.Tensor
            ``[R]`` float64: :math:`b + w_1 z(H(q)) + w_2 z(t) + g(h)`.
        """
        c = (_cheap(entropy, position) - self.mu[:2]) / self.sd[:2]
        s = self.b + c @ self.w[:2]
        if self.kind == "head":
            h = (hidden.double() - self.mu_h) / self.sd_h
            s = s + torch.relu(h @ self.W1 + self.b1) @ self.w2
        return s

    def token_score(self, q: torch.Tensor) -> torch.Tensor:
        """The token-dependent part for every entry of ``q`` (any shape).

        Parameters
        ----------
        q : torch.Tensor
            Draft probabilities :math:`q(x)` (any shape).

        Returns
        -------
        torch.Tensor
            Same shape, float64: :math:`w_3 z(\\log q(x)) + w_4 z(q(x))`.
        """
        return ((_tok(q) - self.mu[2:]) / self.sd[2:]) @ self.w[2:]

    def score_rows(self, hidden, entropy, position, q_x) -> torch.Tensor:
        """Score of the drafted token of each dataset row, ``[N]``.

        Parameters
        ----------
        hidden : torch.Tensor
            ``[N, H]`` hidden states.
        entropy : torch.Tensor
            ``[N]`` draft entropies.
        position : torch.Tensor
            ``[N]`` positions.
        q_x : torch.Tensor
            ``[N]`` draft probability of each row's drafted token.

        Returns
        -------
        torch.Tensor
            ``[N]`` float64 scores :math:`s(x)` (logits of the pass probability).
        """
        return self.context_score(hidden, entropy, position) + self.token_score(q_x)

    def score_vocab(self, f: Features) -> torch.Tensor:
        """Score of every token of the vocabulary at each position, ``[R, V]``.

        Parameters
        ----------
        f : otspec_gpu.sprinter.rules.Features
            The draft's view of ``R`` positions.

        Returns
        -------
        torch.Tensor
            ``[R, V]`` float64 scores.
        """
        return self.context_score(f.hidden, f.entropy, f.position)[:, None] + self.token_score(f.q)


def _rows(model: ScoreModel, ds) -> torch.Tensor:
    return model.score_rows(ds.hidden, ds.entropy, ds.position, ds.q_x)


def train(
    ds,
    *,
    kind: str = "head",
    label: str = "hard",
    units: int = 32,
    steps: int = 400,
    lr: float = 1e-2,
    weight_decay: float = 1e-3,
    seed: int = 0,
) -> ScoreModel:
    """Fit a :class:`ScoreModel` to a :class:`~otspec_gpu.sprinter.data.Dataset` (full-batch Adam, seeded).

    Parameters
    ----------
    ds : otspec_gpu.sprinter.data.Dataset
        Training rows.
    kind : {"logreg", "head"}
    label : {"hard", "soft"}
        Train on :math:`1\\{q \\le p\\}` or on :math:`\\min(1, p/q)`.
    units, steps, lr, weight_decay, seed :
        Head width, Adam steps and settings, initialisation seed.

    Returns
    -------
    ScoreModel
        The fitted model in eval mode (standardisation taken from ``ds``).

    Raises
    ------
    SprinterInputError
        If ``label`` is unknown or ``ds`` has fewer than 2 rows.
    """
    if label not in ("hard", "soft"):
        raise SprinterInputError(f"label must be 'hard' or 'soft' (got {label!r})")
    if len(ds) < 2:
        raise SprinterInputError(f"training needs at least 2 rows (got {len(ds)}); collect more data")
    model = ScoreModel(kind, ds.hidden.shape[1], units)
    with torch.no_grad():
        cheap = torch.cat([_cheap(ds.entropy, ds.position), _tok(ds.q_x)], -1)
        model.mu.copy_(cheap.mean(0))
        model.sd.copy_(cheap.std(0).clamp_min(1e-6))
        h = ds.hidden.double()
        model.mu_h.copy_(h.mean(0))
        model.sd_h.copy_(h.std(0).clamp_min(1e-6))
    (g,) = generators(seed, 1)
    model.init(g)
    y = ds.label.double() if label == "hard" else ds.soft.double()
    opt = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    for _ in range(int(steps)):
        opt.zero_grad()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(_rows(model, ds), y)
        loss.backward()
        opt.step()
    model.eval()
    return model


@torch.no_grad()
def metrics(model: ScoreModel, ds, threshold: float = 0.5, *, bins: int = 10) -> dict:
    r"""Held-out quality of the verifier at ``threshold`` against the hard label.

    Returns accuracy, the majority-class accuracy, the **false-accept rate** (share of rows with
    :math:`p(x) < q(x)` that pass: the ones that cost fidelity), the pass rate on rows with
    :math:`p \ge q`, the overall pass rate, log-loss, Brier score, AUC, and the expected
    calibration error over ``bins`` equal-width bins of :math:`\sigma(s)` with its reliability table.

    Parameters
    ----------
    model : ScoreModel
        The fitted score.
    ds : otspec_gpu.sprinter.data.Dataset
        Held-out rows.
    threshold : float
        Decision threshold :math:`\theta` on :math:`\sigma(s)`.
    bins : int
        Number of calibration bins.

    Returns
    -------
    dict
        ``n``, ``threshold``, ``accuracy``, ``majority_accuracy``, ``positive_rate``,
        ``false_accept_rate``, ``true_pass_rate``, ``pass_rate``, ``log_loss``, ``brier``, ``auc``,
        ``ece`` and ``reliability`` (one dict per non-empty bin).
    """
    s = torch.sigmoid(_rows(model, ds))
    y = ds.label.bool()
    pred = s >= threshold
    n = len(ds)
    pos = float(y.double().mean())
    edges = torch.linspace(0, 1, bins + 1, dtype=torch.float64)
    idx = torch.clamp(torch.bucketize(s, edges, right=True) - 1, 0, bins - 1)
    ece, table = 0.0, []
    for k in range(bins):
        m = idx == k
        if bool(m.any()):
            conf, freq = float(s[m].mean()), float(y[m].double().mean())
            ece += float(m.double().mean()) * abs(conf - freq)
            table.append({"bin": [float(edges[k]), float(edges[k + 1])], "n": int(m.sum()), "mean_prob": conf, "frequency": freq})
    ranks = torch.empty(n, dtype=torch.float64)
    ranks[torch.argsort(s)] = torch.arange(1, n + 1, dtype=torch.float64)
    n1, n0 = int(y.sum()), int((~y).sum())
    auc = (float(ranks[y].sum()) - n1 * (n1 + 1) / 2) / (n1 * n0) if n1 and n0 else float("nan")
    eps = 1e-12
    return {
        "n": n,
        "threshold": float(threshold),
        "accuracy": float((pred == y).double().mean()),
        "majority_accuracy": max(pos, 1 - pos),
        "positive_rate": pos,
        "false_accept_rate": float(pred[~y].double().mean()) if n0 else float("nan"),
        "true_pass_rate": float(pred[y].double().mean()) if n1 else float("nan"),
        "pass_rate": float(pred.double().mean()),
        "log_loss": float(-(y.double() * torch.log(s + eps) + (~y).double() * torch.log(1 - s + eps)).mean()),
        "brier": float(((s - y.double()) ** 2).mean()),
        "auc": auc,
        "ece": ece,
        "reliability": table,
    }


class ClassifierVerifier(PassRule):
    r"""Pass drafted token :math:`x` iff :math:`\sigma(s(x)) \ge \theta` (:math:`a(x) \in \{0, 1\}` over the vocabulary).

    Parameters
    ----------
    model : ScoreModel
        The trained score.
    threshold : float
        :math:`\theta \in [0, 1]`.
    meta : dict, optional
        Provenance (training data, metrics), saved with the weights.

    Raises
    ------
    SprinterInputError
        If ``threshold`` is outside ``[0, 1]``.
    """

    def __init__(self, model: ScoreModel, threshold: float = 0.5, *, meta: dict | None = None):
        threshold = float(threshold)
        if not (0.0 <= threshold <= 1.0):
            raise SprinterInputError(f"threshold must lie in [0, 1] (got {threshold!r}); e.g. 0.5")
        self.model, self.threshold, self.meta = model, threshold, dict(meta or {})
        self.name = f"sprinter-{model.kind}@{threshold:g}"

    def with_threshold(self, threshold: float) -> ClassifierVerifier:
        """The same classifier with another decision threshold.

        Parameters
        ----------
        threshold : float
            :math:`\\theta \\in [0, 1]`.

        Returns
        -------
        ClassifierVerifier
            A new verifier sharing the model and provenance.
        """
        return ClassifierVerifier(self.model, threshold, meta=self.meta)

    @torch.no_grad()
    def pass_prob(self, f: Features) -> torch.Tensor:
        """:math:`a(x) = 1\\{\\sigma(s(x)) \\ge \\theta\\}` for every token at every position.

        Parameters
        ----------
        f : Features
            The draft's view of ``R`` positions.

        Returns
        -------
        torch.Tensor
            ``[R, V]`` float64 of 0.0 / 1.0.

        Raises
        ------
        SprinterInputError
            If the draft's hidden size differs from the one the model was trained on.
        """
        if f.hidden.shape[-1] != self.model.hidden_size:
            raise SprinterInputError(
                f"the verifier was trained on hidden size {self.model.hidden_size} but the draft has {f.hidden.shape[-1]}; use weights trained for this draft"
            )
        return (torch.sigmoid(self.model.score_vocab(f)) >= self.threshold).double()


def save_verifier(v: ClassifierVerifier, path: str | Path) -> Path:
    """Write the weights, threshold and provenance to a ``.safetensors`` file.

    Parameters
    ----------
    v : ClassifierVerifier
        The verifier to save.
    path : str or pathlib.Path
        Destination (parent folders are created).

    Returns
    -------
    pathlib.Path
        ``path``.
    """
    from safetensors.torch import save_file

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = {"kind": v.model.kind, "hidden_size": v.model.hidden_size, "units": v.model.units, "threshold": v.threshold, "info": v.meta}
    save_file(
        {k: t.contiguous() for k, t in v.model.state_dict().items()}, str(path), metadata={"otspec_sprinter_verifier": json.dumps(meta)}
    )
    return path


def load_verifier(path: str | Path, threshold: float | None = None) -> ClassifierVerifier:
    """Read a verifier written by :func:`save_verifier` (``threshold`` overrides the stored one).

    Parameters
    ----------
    path : str or pathlib.Path
        A file written by :func:`save_verifier`.
    threshold : float, optional
        Decision threshold (default: the stored one).

    Returns
    -------
    ClassifierVerifier
        The verifier, model in eval mode.

    Raises
    ------
    SprinterInputError
        If the file is missing, unreadable, or not a SPRINTER verifier file.
    """
    from safetensors import safe_open

    path = Path(path)
    if not path.exists():
        raise SprinterInputError(
            f"verifier weights {str(path)!r} do not exist; train them with experiments/sprinter.py or otspec_gpu.sprinter.classifier.train"
        )
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = (f.metadata() or {}).get("otspec_sprinter_verifier")
            state = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 - safe_open is not iterable
    except Exception as exc:  # noqa: BLE001 - safetensors raises its own error types for a corrupt file
        raise SprinterInputError(f"cannot read verifier weights {str(path)!r} ({exc}); pass a file written by save_verifier") from None
    if meta is None:
        raise SprinterInputError(f"{str(path)!r} is not a SPRINTER verifier file (no 'otspec_sprinter_verifier' metadata)")
    m = json.loads(meta)
    model = ScoreModel(m["kind"], m["hidden_size"], m["units"])
    model.load_state_dict(state)
    model.eval()
    return ClassifierVerifier(model, m["threshold"] if threshold is None else threshold, meta=m.get("info", {}))
