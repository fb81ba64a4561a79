"""Several worker processes serving one broker (issue 47, docs/multicore.md): the pieces
they share. `framing` is the sans-IO format of the batches that cross between worker
processes; `link` carries them over a socket with one write per loop turn."""
