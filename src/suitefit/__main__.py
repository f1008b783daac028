from suitefit.cli import main

main()
