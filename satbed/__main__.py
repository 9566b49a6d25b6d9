from satbed.cli import main

raise SystemExit(main())
