"""The benchmark scripts (docs/benchmarks.md), each run as a file: `python bench/<name>.py`. A
package so that their smoke runs (bench/tests) are collected with the suite."""
