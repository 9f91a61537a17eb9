python3 packages/tiny-llm/benchmarks/peers.py --quick --points llama-3.2-1b@2048x8 --precisions fp8-tensorwise --cases peer_a --output $OUT/peers-fp8-peer-a.json
