"""`python -m albert_edu.book export|check|run [CHAPTER]`: the book's own commands, the same as `albert-edu book`
(see albert_edu.tools.cli). Nothing here is taught; the package only gives the command the name DESIGN.md uses."""
