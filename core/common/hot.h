#pragma once
// KVSIM_HOT marks the functions every engine step runs: the V1 schedulers' loops, the manager's
// and the coordinator's allocation, caching, hashing and freeing, the block pool and the hash
// table. GCC and Clang place such functions together (.text.hot), so that a step's code spans
// few instruction-cache sets. Left in link order, interleaved with cold code, vllm-0.20's step
// code (about 26 KB) put up to 12 lines into some of the 64 sets of a 32 KB 8-way L1I: callgrind
// counted 2.3-3.2 M L1I misses on bench_replay's 300k-op sched trace, 0.55 M with the functions
// grouped (bench/README.md, "Fourth speed pass").
#define KVSIM_HOT [[gnu::hot]]
