r"""Pass rules for SPRINTER: what the cheap verifier does at one drafted position.

A pass rule maps the draft's view of a position (its last hidden state, its next-token law
:math:`q`, the entropy of :math:`q` and the position) to **pass probabilities**
:math:`a(x) \in [0, 1]` for *every* token :math:`x` of the vocabulary (a ``[R, V]`` tensor).
Computing :math:`a` over the whole vocabulary, not only at the drafted token, is what makes the
fidelity accounting exact: the position then contributes
:math:`\sum_x a(x)\,(q(x)-p(x))_+` to the certified bound (see :mod:`otspec_gpu.sprinter.decoding`).

* :class:`ConstantPass` -- :math:`a \equiv c` (a context-blind coin; TV :math:`c\, d_{TV}(p,q)`);
* :class:`OraclePass` -- :math:`a = 1\{p \ge q\}`, which needs the target's law at the position
  (a test device: it costs a target forward, counted apart from the decoder's target calls);
* :class:`otspec_gpu.sprinter.classifier.ClassifierVerifier` -- a trained classifier and a
  decision threshold.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from otspec.errors import SprinterInputError

__all__ = ["ConstantPass", "Features", "OraclePass", "PassRule", "entropy"]


def entropy(q: torch.Tensor) -> torch.Tensor:
    """Shannon entropy (nats) of each row of ``q`` [R, V].

    Parameters
    ----------
    q : torch.Tensor
        ``[R, V]`` distributions.

    Returns
    -------
    torch.Tensor
        ``[R]`` float64 :math:`-\\sum_x q(x) \\log q(x)` (zero entries contribute 0).
    """
    q = q.double()
    return -(torch.where(q > 0, q * torch.log(q.clamp_min(1e-300)), torch.zeros_like(q))).sum(-1)


@dataclass(frozen=True, eq=False)
class Features:
    """The draft's view of ``R`` positions.

    Attributes
    ----------
    hidden : Tensor [R, H] float32
        The draft's last hidden layer at the position that produces the next-token logits (it sees
        the context only, not the token drafted there).
    q : Tensor [R, V] float64
        The draft's next-token law (after the sampling transform).
    entropy : Tensor [R] float64
        Entropy of ``q`` in nats.
    position : Tensor [R] float64
        Number of tokens generated before this one.
    p : Tensor [R, V] float64 or None
        The target's law at the position; only computed for rules with ``needs_target``.
    """

    hidden: torch.Tensor
    q: torch.Tensor
    entropy: torch.Tensor
    position: torch.Tensor
    p: torch.Tensor | None = None


class PassRule:
    """Base class: ``pass_prob(features) -> [R, V]`` float64 in [0, 1]."""

    name = "rule"
    needs_target = False

    def pass_prob(self, f: Features) -> torch.Tensor:  # pragma: no cover - abstract
        """The pass probability :math:`a(x)` of every token at every position.

        Parameters
        ----------
        f : Features
            The draft's view of ``R`` positions (``f.p`` set when :attr:`needs_target`).

        Returns
        -------
        torch.Tensor
            ``[R, V]`` float64 in ``[0, 1]``.
        """
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name})"


class ConstantPass(PassRule):
    r"""Pass every drafted token with probability ``c`` (``c = 1``: never consult the target before the cap).

    Parameters
    ----------
    c : float
        The pass probability, in ``[0, 1]``.

    Raises
    ------
    SprinterInputError
        If ``c`` is outside ``[0, 1]``.

    Examples
    --------
    >>> import torch
    >>> f = Features(hidden=torch.zeros(1, 2), q=torch.tensor([[0.5, 0.5]], dtype=torch.float64),
    ...              entropy=torch.zeros(1, dtype=torch.float64), position=torch.zeros(1, dtype=torch.float64))
    >>> ConstantPass(0.25).pass_prob(f).tolist()
    [[0.25, 0.25]]
    """

    def __init__(self, c: float):
        c = float(c)
        if not (0.0 <= c <= 1.0):
            raise SprinterInputError(f"the constant pass probability must lie in [0, 1] (got {c!r}); pass e.g. 0.5")
        self.c = c
        self.name = f"constant({c:g})"

    def pass_prob(self, f: Features) -> torch.Tensor:
        """``c`` everywhere, ``[R, V]``."""
        return torch.full_like(f.q, self.c, dtype=torch.float64)


class OraclePass(PassRule):
    r"""Pass exactly the tokens with :math:`p(x) \ge q(x)`: the label SPRINTER's classifier learns.

    Every such token would be kept by the exact rule anyway, so the certified bound is 0 and the
    output law is the target's; it needs the target's law, so it saves no target compute (a test
    device and the ceiling a perfect classifier could reach).
    """

    name = "oracle"
    needs_target = True

    def pass_prob(self, f: Features) -> torch.Tensor:
        """:math:`1\\{p(x) \\ge q(x)\\}`, ``[R, V]`` (needs ``f.p``)."""
        if f.p is None:
            raise SprinterInputError(
                "the oracle pass rule needs the target's law p at the position; the decoder supplies it when needs_target is set"
            )
        return (f.p >= f.q).double()
