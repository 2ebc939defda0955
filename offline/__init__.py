"""Offline preview of the gpu-cluster stack under Pulumi's own mock runtime.

Layout:
  stackconfig.py  Pulumi.<stack>.yaml → the config map the CLI would pass (secrets → placeholders)
  runtime.py      mocks + recording monitor; runs __main__.py and waits for every registration
  normalize.py    wire-shaped inputs → stable data (ints, "[secret]", "[unknown]")
  model.py        the normalised resource graph (layers, summary)
  render.py       plan.json, manifests/, helm/, artifacts, rendered/<stack>/ files
  yamlfast.py     fast, round-trip-tested YAML emitter for JSON-shaped data
  diff.py         rendered/<stack> vs now: create/update/replace/delete, physical changes first
  policy.py       runs policies/gpu_guardrails like the pulumi-policy analyzer
  preview.py      orchestration and writing
  cli.py          `python -m offline preview | check-rendered | bench`
  bench.py        scaling benchmark against the SDK floor
  bench_split.py  a split site's parts beside the whole site
  bench_engine.py the real `pulumi preview` beside the offline preview, and where its time goes
  bench_datacentre.py  the simulated data centre's real `pulumi up`, and where its time goes
  engine.py       where the real engine is, and its environment for a scratch stack
"""
