#pragma once
// KVSIM_HOT marks the functions every engine step runs: the V1 schedulers' loops, the manager's
// and the coordinator's allocation, caching, hashing and freeing, the block pool and the hash
// table. GCC and Clang place such functions together (.text.hot), away from cold code. A member
// template needs the attribute on its declaration: on the out-of-class definition alone GCC 12
// emitted some instantiations in .text. What grouping buys is layout-dependent and small on its
// own (bench/README.md, "Fourth speed pass" and "Fifth speed pass": callgrind's simulated L1I
// misses move with layout far more than the wall clock does).
#define KVSIM_HOT [[gnu::hot]]
