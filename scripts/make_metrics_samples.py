"""Write the small serving-metrics samples in data_samples/metrics/ (run from the repository root).

vllm_metrics.txt: a /metrics exposition with vLLM's speculative counters (names as vLLM registers
them), written by prometheus_client itself so the format is the real one. sglang_meta_info.jsonl:
two SGLang /generate responses' meta_info with the speculative fields. The numbers are chosen by
hand (3 positions) so the conversions can be checked on paper: see docs/serving-metrics.md.
"""
import json
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, generate_latest

OUT = Path(__file__).resolve().parents[1] / "data_samples" / "metrics"
OUT.mkdir(parents=True, exist_ok=True)

reg = CollectorRegistry()
labels = ["model_name", "engine"]
lv = ("moonshotai/Kimi-K2.5", "0")
Counter("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", labels, registry=reg).labels(*lv).inc(4000)
Counter("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", labels, registry=reg).labels(*lv).inc(12000)
Counter("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.", labels, registry=reg).labels(*lv).inc(6640)
per = Counter("vllm:spec_decode_num_accepted_tokens_per_pos", "Accepted tokens per draft position.",
              labels + ["position"], registry=reg)
for pos, n in enumerate((3000, 2160, 1480)):
    per.labels(*lv, str(pos)).inc(n)
text = "\n".join(line for line in generate_latest(reg).decode().splitlines() if "_created" not in line) + "\n"
(OUT / "vllm_metrics.txt").write_text(text)

rows = [
    {"text": "...", "meta_info": {"id": "a1", "prompt_tokens": 812, "completion_tokens": 190, "spec_verify_ct": 100,
                                  "spec_accept_length": 1.9, "spec_accept_rate": 0.06, "spec_num_correct_drafts": 90,
                                  "spec_num_proposed_drafts": 1500, "spec_correct_drafts_histogram": [40, 35, 20, 5]}},
    {"text": "...", "meta_info": {"id": "a2", "prompt_tokens": 640, "completion_tokens": 95, "spec_verify_ct": 50,
                                  "spec_accept_length": 1.9, "spec_accept_rate": 0.06, "spec_num_correct_drafts": 45,
                                  "spec_num_proposed_drafts": 750, "spec_correct_drafts_histogram": [20, 20, 5, 5]}},
]
(OUT / "sglang_meta_info.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
print("wrote", *sorted(p.name for p in OUT.iterdir()))
