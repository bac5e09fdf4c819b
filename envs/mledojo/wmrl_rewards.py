"""Client of `wmrl autoresearch serve-rewards` (docs/autoresearch.md, "The
reward service"): wmrl as the reward of an LLM trainer's GRPO loop.

Standard library only. `WmrlRewards` has the signature TRL's GRPO trainer
expects of a reward function (`reward_funcs=[WmrlRewards(...)]`): it takes
the batch's prompts and completions (plain strings or conversational
messages), groups consecutive completions of the same prompt, extracts the
code of each (the first fenced ```python block, or the whole text), and
returns one float per completion. The service returns each candidate's
advantage (standardised within its group, anchor groups weighted), so
TRL's own centring changes nothing; give TRL `scale_rewards="none"` (or `False` in older
versions) to keep the anchor weight, which a per-group division by the
standard deviation would cancel.

    from wmrl_rewards import WmrlRewards
    reward = WmrlRewards("http://127.0.0.1:8799", competition="tabular-regression-0")
    reward(prompts=["p", "p"], completions=["```python\\n...\\n```", "..."])
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request

PROTOCOL = 1
# Most candidates the service takes in one request.
MAX_CANDIDATES = 1024

_FENCE = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL)


class RewardServiceError(RuntimeError):
    """The service refused a request or could not be reached."""


def extract_code(text: str) -> str:
    """The first fenced code block of a completion, or the whole text."""
    m = _FENCE.search(text)
    return m.group(1) if m else text


def _text(completion) -> str:
    # Conversational completions are lists of {"role", "content"} messages.
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        return str(completion.get("content", ""))
    return "".join(_text(m) for m in completion)


class WmrlRewards:
    """A TRL-style reward function backed by the wmrl reward service."""

    __name__ = "wmrl"

    def __init__(self, url: str = "http://127.0.0.1:8799", competition: str | None = None,
                 num_generations: int | None = None, timeout: float = 900.0):
        """`num_generations`: the trainer's completions per prompt (TRL's
        `num_generations`); the batch is cut into groups of that many,
        consecutive. Without it, consecutive completions of equal prompts
        form a group (which merges two adjacent groups of the same prompt:
        give `num_generations` when a batch can hold a prompt twice)."""
        if num_generations is not None and num_generations < 2:
            raise ValueError("num_generations must be at least 2 (GRPO groups)")
        self.url = url.rstrip("/")
        self.competition = competition
        self.num_generations = num_generations
        self.timeout = timeout
        self.last_reply: dict | None = None

    def _call(self, method: str, path: str, body: dict | None = None) -> dict:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                reply = json.loads(r.read())
        except urllib.error.HTTPError as e:
            try:
                message = json.loads(e.read()).get("error", str(e))
            except (ValueError, AttributeError):
                message = str(e)
            raise RewardServiceError(f"{path}: HTTP {e.code}: {message}") from None
        except (urllib.error.URLError, TimeoutError, ConnectionError) as e:
            raise RewardServiceError(f"{self.url}{path}: {e}") from None
        if reply.get("protocol") != PROTOCOL:
            raise RewardServiceError(
                f"the service speaks protocol {reply.get('protocol')}, this client {PROTOCOL}")
        return reply

    def health(self) -> dict:
        return self._call("GET", "/v1/health")

    def score_groups(self, competition: str, groups: list[list[str]]) -> dict:
        """One request: groups of code strings; the service's whole reply."""
        reply = self._call("POST", "/v1/rewards",
                           {"protocol": PROTOCOL, "competition": competition, "groups": groups})
        self.last_reply = reply
        return reply

    def __call__(self, prompts=None, completions=None, competition=None, **kwargs) -> list[float]:
        if completions is None:
            raise ValueError("completions are required")
        n = len(completions)
        prompts = prompts if prompts is not None else [None] * n
        if isinstance(competition, str) or competition is None:
            comps = [competition or self.competition] * n
        else:
            # A dataset column, one per completion; a missing entry falls
            # back to the constructor's competition.
            comps = [c if c is not None else self.competition for c in competition]
        if len(comps) != n or any(c is None for c in comps):
            raise ValueError("no competition: pass competition= here or as a dataset column")
        spans: list[tuple[str, int, int]] = []
        if self.num_generations:
            g = self.num_generations
            if n % g:
                raise ValueError(
                    f"{n} completions are not whole groups of num_generations = {g}: each "
                    "process's batch must hold whole groups (TRL: per-device batch a multiple "
                    "of num_generations)")
            for a in range(0, n, g):
                if len(set(comps[a:a + g])) != 1:
                    raise ValueError(f"completions {a}..{a + g - 1} name several competitions")
                spans.append((comps[a], a, a + g))
        else:
            # Consecutive completions of one (competition, prompt) form a
            # group, as TRL lays out its samples per prompt.
            start = 0
            for i in range(1, n + 1):
                if i == n or comps[i] != comps[start] or _key(prompts[i]) != _key(prompts[start]):
                    spans.append((comps[start], start, i))
                    start = i
        rewards = [0.0] * n
        for comp in dict.fromkeys(c for c, _, _ in spans):
            mine = [(a, b) for c, a, b in spans if c == comp]
            # Requests of whole groups, each under the service's limit.
            batches: list[list[tuple[int, int]]] = [[]]
            size = 0
            for a, b in mine:
                if size + (b - a) > MAX_CANDIDATES and batches[-1]:
                    batches.append([])
                    size = 0
                batches[-1].append((a, b))
                size += b - a
            for batch in batches:
                groups = [[extract_code(_text(completions[k])) for k in range(x, y)]
                          for x, y in batch]
                reply = self.score_groups(comp, groups)
                for (x, _), g in zip(batch, reply["rewards"]):
                    for j, r in enumerate(g):
                        rewards[x + j] = float(r)
        return rewards


def _key(prompt) -> str:
    return prompt if isinstance(prompt, str) else json.dumps(prompt, sort_keys=True, default=str)
