"""Local lm-eval tasks from the shipped Austen texts (no hub access): austen_cloze (multiple
choice: a sentence's last word against three frequent words), austen_ppl (rolling
log-likelihood of passages), austen_gen (generate_until: a sentence continued to its end,
exact match). Deterministic (random.Random(0)).
usage: make_tasks.py TEXT OUTDIR [ITEMS]"""
import json
import random
import re
import sys
from collections import Counter
from pathlib import Path

text, out = Path(sys.argv[1]).read_text(), Path(sys.argv[2])
n = int(sys.argv[3]) if len(sys.argv) > 3 else 40
out.mkdir(parents=True, exist_ok=True)
rng = random.Random(0)
body = re.sub(r"\s+", " ", text)
sents = [s.strip() for s in re.split(r"(?<=[.!?])\s", body) if 8 <= len(s.split()) <= 30]
words = Counter(w for s in sents for w in re.findall(r"[a-z]+", s.lower()))
common = [w for w, _ in words.most_common(300) if len(w) > 3]
items = rng.sample(sents, 3 * n)

cloze = []
for s in items[:n]:
    m = re.match(r"(.*\s)([A-Za-z]+)([.!?])$", s)
    if not m:
        continue
    ans = m.group(2)
    wrong = [w for w in rng.sample(common, 6) if w != ans.lower()][:3]
    choices = [ans] + wrong
    rng.shuffle(choices)
    cloze.append({"context": m.group(1).rstrip(), "choices": choices, "label": choices.index(ans)})
ppl = [{"text": " ".join(items[n + i:n + i + 3])} for i in range(0, n, 3)]
gen = [{"question": " ".join(s.split()[:-3]), "answer": " " + " ".join(s.split()[-3:])}
       for s in items[2 * n:]]
for name, rows in (("cloze", cloze), ("ppl", ppl), ("gen", gen)):
    (out / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

common_yaml = "dataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {path}\ntest_split: test\n"
(out / "austen_cloze.yaml").write_text(
    "task: austen_cloze\n" + common_yaml.format(path=out / "cloze.jsonl") +
    "output_type: multiple_choice\ndoc_to_text: context\ndoc_to_choice: choices\n"
    "doc_to_target: label\nmetric_list:\n  - metric: acc\n")
(out / "austen_ppl.yaml").write_text(
    "task: austen_ppl\n" + common_yaml.format(path=out / "ppl.jsonl") +
    "output_type: loglikelihood_rolling\ndoc_to_text: \"\"\ndoc_to_target: \"{{text}}\"\n"
    "metric_list:\n  - metric: word_perplexity\n  - metric: byte_perplexity\n"
    "  - metric: bits_per_byte\n")
(out / "austen_gen.yaml").write_text(
    "task: austen_gen\n" + common_yaml.format(path=out / "gen.jsonl") +
    "output_type: generate_until\ndoc_to_text: \"{{question}}\"\ndoc_to_target: \"{{answer}}\"\n"
    "generation_kwargs:\n  until: [\".\", \"\\n\"]\n  max_gen_toks: 8\n  do_sample: false\n"
    "metric_list:\n  - metric: exact_match\n")
print(f"{len(cloze)} cloze, {len(ppl)} ppl, {len(gen)} gen items in {out}")
