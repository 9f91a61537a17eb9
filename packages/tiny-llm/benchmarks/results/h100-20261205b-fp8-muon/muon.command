python3 packages/tiny-llm/benchmarks/muon_update.py --points 250m@2048x16 --optimizers adamw muon --budget-seconds 60 --output $OUT/muon-update.json
