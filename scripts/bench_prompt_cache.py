# The client side of scripts/bench_prompt_cache (see there): one step per call.
import http.client, json, os, re, statistics, sys, time

def post(port, path, body):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=7200)
    c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    data = json.loads(r.read())
    if r.status != 200:
        sys.exit(f"{path}: {r.status} {data}")
    return data

def served_id():  # the daemon names the model after its folder
    return os.path.splitext(os.path.basename(os.environ["MODEL"].rstrip("/")))[0]

def sentences(n):
    return " ".join(f"Note {i}: the quick brown fox jumps over the lazy dog near bank {i * 7}."
                    for i in range(n))

def conversation(port, tokens):
    n = 40
    for _ in range(3):  # size the text by the daemon's own count
        msgs = [{"role": "user", "content": sentences(n)}]
        got = post(port, "/v1/messages/count_tokens", {"model": served_id(), "messages": msgs})["input_tokens"]
        n = max(1, round(n * tokens / got))
    return [{"role": "user", "content": sentences(n)}]

def end_id():  # banned, so that every decode run writes its 32 tokens
    specials = json.load(open(os.path.join(os.environ["MODEL"], "specials.json")))
    return str([s["id"] for s in specials if s["text"] == "<|im_end|>"][0])

def timed_turn(port, messages):
    t0 = time.perf_counter()
    r = post(port, "/v1/chat/completions",
             {"messages": messages, "max_tokens": 1, "temperature": 0})
    return time.perf_counter() - t0, r

step = sys.argv[1]
if step == "turn1":
    port, tokens, d = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    msgs = conversation(port, tokens)
    wall, r = timed_turn(port, msgs)
    msgs.append({"role": "assistant", "content": r["choices"][0]["message"]["content"] or ""})
    msgs.append({"role": "user", "content": "And what follows from all of that?"})
    json.dump(msgs, open(os.path.join(d, "turn2-messages.json"), "w"))
    print(json.dumps({"seconds": wall, "usage": r["usage"]}))
elif step == "turn2":
    port, d = int(sys.argv[2]), sys.argv[4]
    wall, r = timed_turn(port, json.load(open(os.path.join(d, "turn2-messages.json"))))
    print(json.dumps({"seconds": wall, "usage": r["usage"]}))
elif step == "decode":
    port, warm, log = int(sys.argv[2]), sys.argv[3] == "true", sys.argv[4]
    deadline = time.time() + 600
    while warm and "expert cache: warmed" not in open(log).read() and time.time() < deadline:
        time.sleep(0.1)
    post(port, "/v1/chat/completions",
         {"messages": [{"role": "user", "content": "Count slowly to ten, please."}],
          "max_tokens": 32, "temperature": 0, "logit_bias": {end_id(): -100}})
    # The one request this daemon decoded: its rate at full precision.
    c = http.client.HTTPConnection("127.0.0.1", port)
    c.request("GET", "/metrics")
    metrics = dict(l.split(" ", 1) for l in c.getresponse().read().decode().splitlines()
                   if l and not l.startswith("#"))
    out, tps = int(float(metrics["waste_completion_tokens_total"])), float(
        metrics["waste_decode_tokens_per_second"])
    w = re.search(r"warmed (\d+) records in ([0-9.]+) s", open(log).read())
    print(json.dumps({"warm": warm, "tokens": out, "decode_tps": tps,
                      "warmed": int(w.group(1)) if w else 0,
                      "warm_seconds": float(w.group(2)) if w else 0.0}))
elif step == "report":
    gbps, d = float(sys.argv[2]), sys.argv[3]
    t1 = json.load(open(os.path.join(d, "turn1.json")))
    t2 = json.load(open(os.path.join(d, "turn2.json")))
    restore = re.search(r"restored (\d+) tokens from disk \(([0-9.]+) MiB in (\d+) files\) in ([0-9.]+) s",
                        open(os.path.join(d, "turn2.log")).read())
    mib, load = float(restore.group(2)), float(restore.group(4))
    rows = [json.loads(l) for l in open(os.path.join(d, "decode.jsonl"))]
    warm = [r["decode_tps"] for r in rows if r["warm"]]
    cold = [r["decode_tps"] for r in rows if not r["warm"]]
    print(json.dumps({
        "read_gbps_o_direct": gbps,
        "cold_turn1_prompt_tokens": t1["usage"]["prompt_tokens"],
        "cold_time_to_first_token_s": t1["seconds"],
        "restart_turn2_prompt_tokens": t2["usage"]["prompt_tokens"],
        "restart_cached_tokens": t2["usage"]["prompt_tokens_details"]["cached_tokens"],
        "restart_time_to_first_token_s": t2["seconds"],
        "speedup": t1["seconds"] / t2["seconds"],
        "snapshot_mib": mib, "snapshot_files": int(restore.group(3)), "snapshot_load_s": load,
        "snapshot_floor_s": mib * 1048576 / (gbps * 1e9),
        "decode_tps_warm": warm, "decode_tps_cold": cold,
        "decode_median_ratio_warm_over_cold": statistics.median(w / c for w, c in zip(warm, cold)),
        "warmed_records": [r["warmed"] for r in rows if r["warm"]],
        "warm_seconds": [r["warm_seconds"] for r in rows if r["warm"]],
    }, indent=1))
