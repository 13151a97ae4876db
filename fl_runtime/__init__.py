"""Process machinery both sides' kits run, below every other package: the warm job launcher that forks each job's
process from an already-imported one (`job_launcher`, its fork server `warm_job`), the prompt exit of a job
process once FLARE is done with it (`process_exit`), and the guarded web frame both status pages are served by
(`status_server`). It knows FLARE's process interfaces and nothing of ours."""
