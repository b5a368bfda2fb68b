"""Reproductions from reviews: each module pins findings of one review (adversarial rounds,
issue 6 holes, chaos finds), and its docstring names them. A new finding gets its test here."""
