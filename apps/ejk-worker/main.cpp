// ejk-worker: runs tuning candidates for a tuner in another process, so that a candidate that
// crashes or hangs takes down only this process. Speaks the JSON-lines protocol of
// lib/src/tune/worker.hpp on standard input and output; not meant to be started by hand.
#include "ejk/tuner.hpp"

int main() { return ejk::worker_main(); }
