#!/usr/bin/env python3
"""wmrl as the reward of TRL's GRPO trainer (docs/autoresearch.md, "The
reward service"). Not run in CI: it needs `pip install trl` (which brings
torch and transformers) and a language model; CI checks the same client
against the real service in envs/mledojo/rewards_check.py.

    # 1. the code world model, from wmrl's own sandbox results
    wmrl autoresearch collect --split train --per-competition 24 --out runs/autoresearch/train.jsonl
    wmrl autoresearch fit-predictor --code --data runs/autoresearch/train.jsonl \\
        --out runs/autoresearch/code_predictor.onnx
    # 2. the service (a quarter of the groups executed in the sandbox)
    wmrl autoresearch serve-rewards --anchor-fraction 0.25 &
    # 3. this script
    python envs/mledojo/trl_grpo_example.py --model Qwen/Qwen2.5-0.5B-Instruct
"""

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from wmrl_rewards import WmrlRewards  # noqa: E402


def prompts(suite_dir: str, split: str = "train"):
    """One prompt per competition of the split, with its description."""
    suite = json.load(open(os.path.join(suite_dir, "suite.json")))
    rows = []
    for c in suite["competitions"]:
        if c["split"] != split:
            continue
        name = c["name"]
        desc = open(os.path.join(suite_dir, name, "data", "public", "description.txt")).read()
        rows.append({
            "prompt": [{"role": "user", "content":
                        f"{desc}\nWrite a Python solution that reads public/train.csv and "
                        "public/test.csv and writes submission.csv. Answer with one "
                        "```python block."}],
            "competition": name,
        })
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--url", default="http://127.0.0.1:8799")
    ap.add_argument("--suite", default=os.path.join(HERE, "competitions"))
    a = ap.parse_args()
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    data = Dataset.from_list(prompts(a.suite))
    # The `competition` column names each row's competition; groups are
    # TRL's num_generations consecutive completions.
    reward = WmrlRewards(a.url, num_generations=8)
    cfg = GRPOConfig(
        output_dir="runs/trl_grpo",
        num_generations=8,  # one wmrl group per prompt
        per_device_train_batch_size=8,
        max_completion_length=512,
        # The service returns advantages with anchor groups weighted; keep
        # the weight (no per-group division by the standard deviation).
        scale_rewards="none",
        logging_steps=1,
    )
    GRPOTrainer(model=a.model, reward_funcs=[reward], args=cfg, train_dataset=data).train()
    print("last reply:", json.dumps(reward.last_reply)[:400])


if __name__ == "__main__":
    main()
