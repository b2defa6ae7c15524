"""Peak RSS of exact/fuzzy dedup called directly in one process (no Ray), by corpus size.

    uv run python scripts/bench/bench_dedup_memory.py make 100000     # write the corpus once
    uv run python scripts/bench/bench_dedup_memory.py exact 100000    # or fuzzy; one process per run
"""
import os, resource, sys, time
sys.path.insert(0, os.getcwd())
step, docs = sys.argv[1], int(sys.argv[2])
directory = f"scratch/bench/mem/corpus-{docs}"
if step == "make":
    from steps.data.synthetic import generate_corpus
    from steps.documents import write_documents
    corpus = generate_corpus(seed=1, num_originals=int(docs * 0.88), mean_words=30, exact_fraction=0.06,
                             near_fraction=0.06, boilerplate_sites=8, pages_per_site=10).docs
    files = max(1, docs // 50_000)
    per = -(-len(corpus) // files)
    for k in range(files):
        write_documents(f"{directory}/part-{k:05d}.jsonl.zst", corpus[k * per:(k + 1) * per])
    print("docs", len(corpus)); sys.exit()
import shutil
from steps.dedup import ExactDedupConfig, FuzzyDedupConfig, exact_dedup, fuzzy_dedup
out = f"scratch/bench/mem/out-{step}-{docs}"
shutil.rmtree(out, ignore_errors=True)
t = time.time()
r = (exact_dedup(ExactDedupConfig(directory, out)) if step == "exact" else fuzzy_dedup(FuzzyDedupConfig(directory, out)))
print(f"{step} {r['documents_in']} docs: wall {time.time()-t:.1f} s, peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss/1024:.0f} MiB, partitions {r['partitions']}, dups {r['duplicate_documents']}")
