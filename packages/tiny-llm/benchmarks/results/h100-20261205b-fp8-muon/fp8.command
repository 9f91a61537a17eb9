python3 packages/tiny-llm/benchmarks/peers.py --quick --points llama-3.2-1b@2048x8 --precisions bf16 fp8-tensorwise --cases ours peer_a --budget-seconds 120 --output $OUT/peers-fp8.json
