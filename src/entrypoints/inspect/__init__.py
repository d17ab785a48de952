"""``ljrk inspect``: per node and GPU, what is allocated, to whom, and what is wrong."""
