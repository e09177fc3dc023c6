from sokovan.cli.main import main

main()
