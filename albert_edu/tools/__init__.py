"""The toolbox that builds the book, as opposed to the library the chapters teach (the rest of albert_edu):

    manifest   book.toml, the project's paths and the chapter kernels' environment
    export     the library written from the chapters' `#| export` cells, and the check that it is in step
    runner     chapters executed top to bottom with their outputs stored
    html       the rendered HTML book
    classroom  nbgrader assignments from the chapters
    explore    the explorers served as a web app
    cli        the one command line, `albert-edu`

The chapters' modules never import from here (tests/test_layout.py checks it).
"""
