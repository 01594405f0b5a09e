"""Teaching content for the teaching notebooks (00, the primer; 08, debugging a checkpoint): the
primer's toy vocabularies and failure modes, the lessons told once, and each notebook's exercises
with their checkers. Nothing in the library's front ends (`ui`) or commands depends on it.

Modules (import them by name; this file imports nothing):
- `primer`
- `lessons`
- `exercises`
- `primer_exercises`
- `checkpoint_exercises`
"""

__all__ = ["primer", "lessons", "exercises", "primer_exercises", "checkpoint_exercises"]
