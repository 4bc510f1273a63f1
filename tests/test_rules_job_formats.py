"""Each wording the NCCL, PyTorch and Slurm rules cite, rendered from its format string with realistic
values, goes through the real collector (as ingest runs it) and gives its kind and fields."""
from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from conftest import parse_file
from observe.config import BUILTIN_DIR

STAMP = "[2026-11-22T10:00:00.000] "  # slurmctld's own log line header

# (collector, line(s), kind, expected fields, expected attrs)
CASES = {
    # pytorch ProcessGroupNCCL.cpp: checkTimeout + WorkNCCL operator<<, per version
    "timeout v1.10-1.13 no numel": (
        "nccl", "[E ProcessGroupNCCL.cpp:458] [Rank 7] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=64088, "
        "OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1800123 milliseconds before timing out.",
        "nccl_timeout", {"rank": 7}, {"seq": "64088", "op": "ALLREDUCE", "timeout_ms": "1800000", "ran_ms": "1800123"}),
    "timeout v2.0-2.1 NCCL watchdog thread": (
        "nccl", "[E ProcessGroupNCCL.cpp:916] [Rank 2] NCCL watchdog thread terminated with exception: [Rank 2] Watchdog caught "
        "collective operation timeout: WorkNCCL(SeqNum=48490, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) "
        "ran for 1800781 milliseconds before timing out.",
        "nccl_timeout", {"rank": 2}, {"seq": "48490", "op": "ALLREDUCE", "timeout_ms": "1800000", "numel_in": "1"}),
    "timeout v2.2 PG uid prefix": (
        "nccl", "[rank7]:[E ProcessGroupNCCL.cpp:1414] [PG 0 Rank 7] Process group watchdog thread terminated with exception: "
        "[Rank 7] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=BROADCAST, NumelIn=1, NumelOut=1, "
        "Timeout(ms)=600000) ran for 600017 milliseconds before timing out.",
        "nccl_timeout", {"rank": 7}, {"seq": "1", "op": "BROADCAST", "timeout_ms": "600000"}),
    "timeout v2.5+ glog": (
        "nccl", "[rank3]:[E710 18:00:32.426182607 ProcessGroupNCCL.cpp:757] [Rank 3] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=59958, OpType=ALLREDUCE, NumelIn=8388608, NumelOut=8388608, Timeout(ms)=1800000) ran for "
        "1800077 milliseconds before timing out.",
        "nccl_timeout", {"rank": 3}, {"seq": "59958", "op": "ALLREDUCE", "timeout_ms": "1800000", "numel_out": "8388608"}),
    "timeout v2.5+ PG ID wrapper": (
        "nccl", "[rank3]:[E710 18:00:32.426 ProcessGroupNCCL.cpp:1595] [PG ID 0 PG GUID 0(default_pg) Rank 3] Process group "
        "watchdog thread terminated with exception: [Rank 3] Watchdog caught collective operation timeout: WorkNCCL("
        "SeqNum=59958, OpType=_ALLGATHER_BASE, NumelIn=4, NumelOut=32, Timeout(ms)=600000) ran for 600100 milliseconds before timing out.",
        "nccl_timeout", {"rank": 3}, {"seq": "59958", "op": "_ALLGATHER_BASE", "timeout_ms": "600000"}),
    "watchdog v2.2 Exception": (
        "nccl", "[rank0]:[E1206 18:44:12.715588844 ProcessGroupNCCL.cpp:1664] [PG 1 Rank 0] Exception (either an error or "
        "timeout) detected by watchdog at work: 7753, last enqueued NCCL work: 7755, last completed NCCL work: 7752.",
        "nccl_watchdog", {"rank": 0}, {"seq": "7753", "last_enqueued": "7755", "last_completed": "7752"}),
    "watchdog v2.3-2.4 PG name (desc)": (
        "nccl", "[rank1]:[E1003 18:37:01.833575187 ProcessGroupNCCL.cpp:1664] [PG 0 (default_pg) Rank 1] Exception (either an "
        "error or timeout) detected by watchdog at work: 6463, last enqueued NCCL work: 6463, last completed NCCL work: 6462.",
        "nccl_watchdog", {"rank": 1}, {"seq": "6463", "last_completed": "6462"}),
    "watchdog v2.6+ failure detected": (
        "nccl", "[rank5]:[E626 16:48:25.440238649 ProcessGroupNCCL.cpp:2268] [PG ID 0 PG GUID 0(default_pg) Rank 5]  failure "
        "detected by watchdog at work sequence id: 120049 PG status: last enqueued work: 120051, last completed work: 120048",
        "nccl_watchdog", {"rank": 5}, {"seq": "120049", "last_enqueued": "120051", "last_completed": "120048"}),
    "nccl error in: v1.x no version": (
        "nccl", "RuntimeError: NCCL error in: /pytorch/torch/lib/c10d/ProcessGroupNCCL.cpp:514, unhandled system error",
        "nccl_error", {}, {"where": "/pytorch/torch/lib/c10d/ProcessGroupNCCL.cpp:514"}),
    "nccl error in: v2.x with version": (
        "nccl", "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, "
        "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.19.3",
        "nccl_error", {}, {"where": "../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970"}),
    # torch.distributed.elastic
    "elastic failed of binary": (
        "nccl", "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 3 (pid: 208585) of "
        "binary: /usr/bin/python3",
        "torch_elastic_failed", {"code": -9, "pid": 208585}, {"local_rank": "3", "binary": "/usr/bin/python3"}),
    "elastic failed of fn": (
        "nccl", "[2024-01-23 00:54:00,123] torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: 1) "
        "local_rank: 0 (pid: 4242) of fn: main (start_method: spawn)",
        "torch_elastic_failed", {"code": 1, "pid": 4242}, {"local_rank": "0", "binary": "main"}),
    "elastic root cause v1.10+": (
        "nccl", "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n"
        "============================================================\ntrain.py FAILED\n"
        "------------------------------------------------------------\nFailures:\n[1]:\n"
        "  time      : 2026-06-08_19:04:45\n  host      : gpu002\n  rank      : 9 (local_rank: 1)\n"
        "  exitcode  : 1 (pid: 102932)\n  error_file: <N/A>\n"
        "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html\n"
        "------------------------------------------------------------\nRoot Cause (first observed failure):\n[0]:\n"
        "  time      : 2026-06-08_19:04:44\n  host      : gpu002\n  rank      : 8 (local_rank: 0)\n"
        "  exitcode  : -9 (pid: 102930)\n  error_file: <N/A>\n  traceback : Signal 9 (SIGKILL) received by PID 102930\n"
        "============================================================",
        "torch_elastic_root_cause", {"rank": 8, "node": "gpu002", "code": -9, "pid": 102930},
        {"local_rank": "0", "time": "2026-06-08_19:04:44", "detail": "Signal 9 (SIGKILL) received by PID 102930"}),
    "elastic root cause v1.9": (
        "nccl", "Root Cause:\n[0]:\n  time: 2021-06-01_10:00:00\n  rank: 3 (local_rank: 3)\n  exitcode: 1 (pid: 4321)\n"
        "  error_file: /tmp/torchelastic_x/error.json\n  msg: \"Process failed with exitcode 1\"",
        "torch_elastic_root_cause", {"rank": 3, "code": 1, "pid": 4321},
        {"error_file": "/tmp/torchelastic_x/error.json", "detail": "Process failed with exitcode 1"}),
    "elastic root cause srun-labelled": (
        "nccl", "0: Root Cause (first observed failure):\n0: [0]:\n0:   time      : 2026-06-08_19:04:44\n0:   host      : gpu007\n"
        "0:   rank      : 4 (local_rank: 4)\n0:   exitcode  : -6 (pid: 777)\n0:   error_file: <N/A>\n"
        "0:   traceback : Signal 6 (SIGABRT) received by PID 777",
        "torch_elastic_root_cause", {"rank": 4, "node": "gpu007", "code": -6, "pid": 777}, {"local_rank": "4"}),
    "srun task label then torchrun's rank": (  # srun -l torchrun: srun's task (a node), then the process's global rank
        "nccl", "2: [rank20]: RuntimeError: CUDA error: uncorrectable ECC error encountered",
        "cuda_hw_error", {"rank": 20}, {"detail": "uncorrectable ECC error encountered"}),
    "srun task label then torchrun's rank, NCCL": (
        "nccl", "2: [rank20]: gpu023:4242:4250 [4] NCCL INFO comm 0x1 rank 20 nranks 64 cudaDev 4 busId 9a000 - Init COMPLETE",
        "nccl_comm_init", {"rank": 20}, {}),
    # NVIDIA/nccl
    "ib completion 2.4-2.11 no peer": (
        "nccl", "gpu01:3063025:3066048 [3] transport/net_ib.cc:1049 NCCL WARN NET/IB : Got completion with error 12, opcode 1, "
        "len 0, vendor err 129",
        "nccl_net_error", {"code": 12, "node": "gpu01", "gpu": "3"}, {}),
    "ib completion 2.12-2.18 peer, error": (
        "nccl", "gpu003:4100:4180 [2] transport/net_ib.cc:1046 NCCL WARN NET/IB : Got completion from peer 10.0.0.1<53249> "
        "with error 12, opcode 0, len 0, vendor err 129",
        "nccl_net_error", {"code": 12, "node": "gpu003"}, {"peer": "10.0.0.1", "peer_port": "53249"}),
    "ib completion 2.19 (Send)": (
        "nccl", "H100-2:19989:20082 [1] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer "
        "fe80::966d:ae03:8b:df78%ib0<53249> with error 4, opcode 32564, len 32564, vendor err 81 (Send)",
        "nccl_net_error", {"code": 4, "node": "H100-2"}, {"peer": "fe80::966d:ae03:8b:df78%ib0", "peer_port": "53249"}),
    "ib completion 2.20+ status=": (
        "nccl", "gpu005:984:1357 [4] transport/net_ib.cc:2154 NCCL WARN NET/IB : Got completion from peer 172.36.143.59<44206> "
        "with status=12 opcode=129 len=65536 vendor err 129 (Recv) localGid ::ffff:29.87.88.182 remoteGids::ffff:29.87.4.221",
        "nccl_net_error", {"code": 12, "node": "gpu005"}, {"peer": "172.36.143.59", "peer_port": "44206"}),
    "socket closed 2.12 Net :": (
        "nccl", "gpu002:4024:4055 [0] misc/socket.cc:503 NCCL WARN Net : Connection closed by remote peer gpu004.cluster<45321>",
        "nccl_net_error", {"node": "gpu002"}, {"op": "Net", "peer": "gpu004.cluster", "peer_port": "45321"}),
    "socket closed 2.14+ socketProgress": (
        "nccl", "ng30903:3063025:3066048 [0] misc/socket.cc:49 NCCL WARN socketProgress: Connection closed by remote peer "
        "ng30903-ib.narval.calcul.quebec<51159>",
        "nccl_net_error", {"node": "ng30903"}, {"op": "socketProgress", "peer": "ng30903-ib.narval.calcul.quebec", "peer_port": "51159"}),
    "connect failed": (
        "nccl", "ubuntu:39964:40075 [0] misc/socket.cc:483 NCCL WARN socketStartConnect: Connect to 10.0.0.2<45763> failed : "
        "Software caused connection abort",
        "nccl_net_error", {"node": "ubuntu"}, {"op": "socketStartConnect", "peer": "10.0.0.2", "peer_port": "45763"}),
    "socket closed 2.14+ host name peer": (
        "nccl", "ubuntu:39964:40044 [0] misc/socket.cc:49 NCCL WARN socketProgress: Connection closed by remote peer node1<57557>",
        "nccl_net_error", {"node": "ubuntu", "pid": 39964}, {"peer": "node1", "peer_port": "57557"}),
    "socket closed 2.7-2.11 no peer": (
        "nccl", "gpu002:4024:4055 [0] include/socket.h:409 NCCL WARN Net : Connection closed by remote peer",
        "nccl_net_error", {"node": "gpu002"}, {"op": "Net", "peer": None}),
    "connect failed 2.7-2.11": (
        "nccl", "gpu01:4024:4055 [0] include/socket.h:403 NCCL WARN Connect to 10.0.0.2<45763> failed : Connection refused",
        "nccl_net_error", {"node": "gpu01"}, {"peer": "10.0.0.2", "peer_port": "45763"}),
    # proxy.cc ncclPollProxyResponse: WARN("Socket recv failed while polling for opId=%p", opId)
    "proxy socket recv failed": (
        "nccl", "ng30903:3063025:3066048 [0] proxy.cc:1143 NCCL WARN Socket recv failed while polling for opId=0x55a51966cc80",
        "nccl_net_error", {"node": "ng30903", "pid": 3063025}, {"where": "proxy.cc:1143", "op_id": "0x55a51966cc80"}),
    # include/checks.h CUDACHECK: WARN("Cuda failure '%s'", cudaGetErrorString(err))
    "cuda failure out of memory": (
        "nccl", "ng30903:3063028:3066152 [3] include/alloc.h:178 NCCL WARN Cuda failure 'out of memory'",
        "cuda_oom", {"node": "ng30903", "pid": 3063028}, {"where": "include/alloc.h:178", "detail": "out of memory"}),
    "cuda failure other stays a warning": (
        "nccl", "gpu01:12:13 [0] include/alloc.h:178 NCCL WARN Cuda failure 'invalid argument'",
        "nccl_warn", {"node": "gpu01"}, {"detail": "Cuda failure 'invalid argument'"}),
    # proxy.cc: WARN("[Proxy Service %d] Failed to execute operation %s from rank %d, retcode %d", ...)
    "proxy service failed operation": (
        "nccl", "ubuntu:39964:40075 [0] proxy.cc:1519 NCCL WARN [Proxy Service 0] Failed to execute operation Connect "
        "from rank 3, retcode 2",
        "nccl_warn", {"node": "ubuntu", "rank": 3}, {"op": "Connect", "retcode": "2", "proxy_rank": "0"}),
    "nccl warn with func": (
        "nccl", "gpu01:12:13 [0] misc/socket.cc:49 (socketProgress) NCCL WARN Socket recv failed",
        "nccl_warn", {"node": "gpu01"}, {"where": "misc/socket.cc:49", "func": "socketProgress"}),
    "error return async thread": (
        "nccl", "gpu01:430:2237 [0] NCCL INFO misc/group.cu:69 -> 2 [Async thread]",
        "nccl_error", {"code": 2}, {"where": "misc/group.cu:69", "thread": "Async thread", "name": "ncclSystemError"}),
    "error return in progress 2.14+": (
        "nccl", "gpu01:430:2237 [0] NCCL INFO init.cc:1500 -> 7",
        "nccl_error", {"code": 7}, {"name": "ncclInProgress"}),
    "init complete 2.7 busId": (
        "nccl", "gpu01:1234:1300 [0] NCCL INFO comm 0x5581e8a1e4a0 rank 0 nranks 8 cudaDev 0 busId 1c000 - Init COMPLETE",
        "nccl_comm_init", {"rank": 0, "node": "gpu01"}, {"nranks": "8", "cuda_dev": "0", "bus_id": "1c000"}),
    "init complete 2.8 used bytes": (
        "nccl", "gpu01:1234:1300 [3] NCCL INFO comm 0x7f3c58002f50 rank 3 nranks 16 cudaDev 3 busId 3d000 used 301989888 bytes "
        "- Init COMPLETE",
        "nccl_comm_init", {"rank": 3}, {"nranks": "16", "bus_id": "3d000"}),
    "init complete 2.14+ nvmlDev commId": (
        "nccl", "gpu02:1234:1300 [7] NCCL INFO ncclCommInitRank comm 0x55d684f276f1 rank 15 nranks 32 cudaDev 7 nvmlDev 7 "
        "busId db000 commId 0x2eb03d0ead3e7e5d - Init COMPLETE",
        "nccl_comm_init", {"rank": 15, "node": "gpu02"}, {"nranks": "32", "cuda_dev": "7", "bus_id": "db000"}),
    "init complete split": (
        "nccl", "gpu02:1234:1300 [1] NCCL INFO ncclCommSplit comm 0x55d6850a2c10 rank 1 nranks 4 cudaDev 1 nvmlDev 1 busId "
        "1b000 parent 0x55d684f276f1 splitCount 1 color 2003953581 key 1 - Init COMPLETE",
        "nccl_comm_init", {"rank": 1}, {"nranks": "4", "bus_id": "1b000"}),
    # SchedMD/slurm: slurmctld
    "allocate 17.x JobID=": (
        "slurm", STAMP + "sched: Allocate JobID=2088 NodeList=node01 #CPUs=1 Partition=debug",
        "slurm_job_start", {"job_id": "2088"}, {"nodes": "node01", "partition": "debug"}),
    "allocate %pJ array": (
        "slurm", STAMP + "sched: Allocate JobId=1234_7(1241) NodeList=gpu[001-004] #CPUs=256 Partition=gpu",
        "slurm_job_start", {"job_id": "1234_7"}, {"nodes": "gpu[001-004]", "partition": "gpu"}),
    "backfill started": (
        "slurm", STAMP + "sched/backfill: _start_job: Started JobId=1234 in gpu on gpu[001-004]",
        "slurm_job_start", {"job_id": "1234"}, {"nodes": "gpu[001-004]"}),
    "job complete 17.x WEXITSTATUS": (
        "slurm", STAMP + "_job_complete: JobID=1234 State=0x1 NodeCnt=1 WEXITSTATUS 3",
        "slurm_job_end", {"job_id": "1234", "code": 3}, {"status": "WEXITSTATUS"}),
    "job complete 17.x WTERMSIG": (
        "slurm", STAMP + "job_complete: JobID=1234 State=0x8003 NodeCnt=2 WTERMSIG 9",
        "slurm_job_end", {"job_id": "1234", "code": 9}, {"status": "WTERMSIG"}),
    "job complete %pJ array": (
        "slurm", STAMP + "_job_complete: JobId=1234_5(1240) WEXITSTATUS 2",
        "slurm_job_end", {"job_id": "1234_5", "code": 2}, {"status": "WEXITSTATUS"}),
    "job complete OOM failure": (
        "slurm", STAMP + "_job_complete: JobId=1943824 OOM failure",
        "slurm_job_end", {"job_id": "1943824"}, {"state": "OUT_OF_MEMORY"}),
    "time limit %pJ": (
        "slurm", STAMP + "job_time_limit: Time limit exhausted for JobId=1234_5(1240)",
        "slurm_job_end", {"job_id": "1234_5"}, {"state": "TIMEOUT"}),
    "killing on failed node 17.x": (
        "slurm", STAMP + "Killing job_id 1234 on failed node gpu04",
        "slurm_job_end", {"job_id": "1234", "node": "gpu04"}, {"state": "NODE_FAIL"}),
    "killing on failed node %pJ": (
        "slurm", STAMP + "Killing JobId=1234_3(1237) on failed node gpu04",
        "slurm_job_end", {"job_id": "1234_3", "node": "gpu04"}, {"state": "NODE_FAIL"}),
    "requeue due to node failure": (
        "slurm", STAMP + "requeue job JobId=1234 due to failure of node gpu04",
        "slurm_job_requeue", {"job_id": "1234", "node": "gpu04"}, {}),
    "nodes not responding setting DOWN": (
        "slurm", STAMP + "error: Nodes gpu[001-003] not responding, setting DOWN",
        "slurm_node_not_responding", {"node": "gpu[001-003]"}, {}),
    "node now responding": (
        "slurm", STAMP + "Node gpu003 now responding", "slurm_node_responding", {"node": "gpu003"}, {}),
    "update_node DRAINED": (
        "slurm", STAMP + "update_node: node gpu007 state set to DRAINED",
        "slurm_node_drain", {"node": "gpu007"}, {"state": "DRAINED", "by": "update_node"}),
    # slurmctld lines about one node: the node they name (collectors/slurm.py NODE_NAMED)
    "low socket count names the node": (
        "slurm", STAMP + "error: Node c001 has low socket*core*thread count (1 < 20)",
        "slurm_config_error", {"node": "c001"}, {}),
    "low real_memory names the node": (
        "slurm", STAMP + "error: Node gpu07 has low real_memory size (257000 < 512000)",
        "slurm_config_error", {"node": "gpu07"}, {}),
    "different slurm.conf names the node": (
        "slurm", STAMP + "error: Node node001 appears to have a different slurm.conf than the slurmctld.  This could cause "
        "issues with communication and functionality.  Please review both files and make sure they are the same.  If this "
        "is expected ignore, and set DebugFlags=NO_CONF_HASH in your slurm.conf.",
        "slurm_config_error", {"node": "node001"}, {}),
    "node registration rejected": (
        "slurm", STAMP + "error: _slurm_rpc_node_registration node=c001: Invalid argument",
        "slurm_config_error", {"node": "c001"}, {"error": "Invalid argument"}),
    "duplicated NodeHostName via syslog": (
        "slurm", "Feb 24 09:21:38 ctl-01 slurmctld[26180]: error: Duplicated NodeHostName gpu-3 in the config file",
        "slurm_config_error", {"node": "gpu-3", "program": "slurmctld", "pid": 26180}, {}),
    "not responding via syslog keeps the named node": (
        "slurm", "Mar  3 10:00:00 ctl-01 slurmctld[123]: error: Nodes gpu-0 not responding",
        "slurm_node_not_responding", {"node": "gpu-0", "program": "slurmctld"}, {}),
    "gres.conf device missing": (
        "slurm", "Feb 02 09:51:48 gpu-9 slurmd[12912]: slurmd: error: Waiting for gres.conf file /dev/nvidia0",
        "slurm_config_error", {"node": "gpu-9", "program": "slurmd"}, {"file": "/dev/nvidia0"}),
    "MailProg invalid": (
        "slurm", STAMP + "error: Configured MailProg is invalid", "slurm_config_error", {"severity": "err"}, {}),
    "power save waking 21.08+": (
        "slurm", STAMP + "POWER: power_save: waking nodes cloud-gpu-1", "log", {"node": "cloud-gpu-1"}, {}),
    "power save suspending 17.x": (
        "slurm", STAMP + "power_save: suspending nodes cloud-gpu-2", "log", {"node": "cloud-gpu-2"}, {}),
    "power save hostlist names no one node": (
        "slurm", STAMP + "POWER: power_save: waking nodes cloud-gpu-[1-4]", "log", {"node": None}, {}),
    "node_did_resp": ("slurm", STAMP + "debug2: node_did_resp gpu003", "log", {"node": "gpu003"}, {}),
    "node returned to service": (
        "slurm", STAMP + "node gpu08 returned to service", "slurm_node_resume", {"node": "gpu08"}, {}),
    "node configuration differs names none": (
        "slurm", STAMP + "error: Node configuration differs from hardware: CPUs=2:4(hw) Boards=1:1(hw)",
        "slurm_config_error", {"node": None}, {}),
    # scontrol show node (src/api/node_info.c "State=%s%s%s%s%s ThreadsPerCore=%u ..."), sinfo -lN rows
    "scontrol State=IDLE+DRAIN": (
        "slurm", "   State=IDLE+DRAIN ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A",
        "slurm_node_drain", {}, {"state": "IDLE+DRAIN"}),
    "scontrol State=MIXED+DRAIN": (
        "slurm", "   State=MIXED+DRAIN ThreadsPerCore=2 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A",
        "slurm_node_drain", {}, {"state": "MIXED+DRAIN"}),
    "sinfo -lN down*": (
        "slurm", "compute001      1     main*       down*   12   12:1:1  64267        0      1   (null) Not responding",
        "slurm_node_down", {"node": "compute001"}, {"state": "down*", "reason": "Not responding"}),
    "sinfo -lN drained": (
        "slurm", "gpu007          1       gpu     drained   64   2:32:1 512000        0      1   (null) Kill task failed",
        "slurm_node_drain", {"node": "gpu007"}, {"state": "drained", "reason": "Kill task failed"}),
    # slurmstepd and srun, in the job's output
    "stepd cancelled time limit": (
        "nccl", "slurmstepd: error: *** JOB 1234 ON gpu001 CANCELLED AT 2024-01-01T00:00:00 DUE TO TIME LIMIT ***",
        "slurm_job_cancelled", {"job_id": "1234", "node": "gpu001"}, {"reason": "TIME LIMIT"}),
    "stepd cancelled requeue": (
        "nccl", "slurmstepd: error: *** JOB 1234 ON gpu001 CANCELLED AT 2024-01-01T00:00:00 DUE TO JOB REQUEUE ***",
        "slurm_job_requeue", {"job_id": "1234", "node": "gpu001"}, {}),
    "stepd extern step cancelled": (
        "nccl", "slurmstepd: error: *** EXTERN STEP FOR 1234 ON gpu001 CANCELLED AT 2024-01-01T00:00:00 ***",
        "slurm_job_cancelled", {"job_id": "1234", "node": "gpu001"}, {}),
    "stepd unkillable step": (
        "nccl", "slurmstepd: error: *** STEP 63532.0 STEPD TERMINATED ON cn106 AT 2020-12-14T09:44:56 DUE TO JOB NOT ENDING WITH SIGNALS ***",
        "log", {"job_id": "63532", "node": "cn106"}, {}),
    # slurmctld lines about one node name it: that node is the event's (collectors/slurm.py NODE_WORDINGS)
    "ctld unexpected reboot": (
        "slurm", STAMP + "validate_node_specs: Node node017 unexpectedly rebooted boot_time=1726123354 last response=1726123285",
        "log", {"node": "node017"}, {}),
    "ctld orphan step": (
        "slurm", STAMP + "error: Orphan JobId=1234 StepId=0 reported on node node017",
        "log", {"node": "node017", "job_id": "1234"}, {}),
    "ctld batch failure": (
        "slurm", STAMP + "error: slurmd error running JobId=6 on node(s)=worker1: Plugin initialization failed",
        "log", {"node": "worker1", "job_id": "6"}, {}),
    "ctld rpc to a node": (
        "slurm", STAMP + "agent/is_node_resp: node:node017 RPC:REQUEST_PING : Communication connection failure",
        "log", {"node": "node017"}, {}),
    "ctld epilog drain": (
        "slurm", STAMP + "error: job_epilog_complete: JobId=44 epilog error on node017, draining the node",
        "log", {"node": "node017", "job_id": "44"}, {}),
    "ctld lookup failure": (
        "slurm", STAMP + 'error: _find_node_record: lookup failure for node "gpu08"',
        "log", {"node": "gpu08"}, {}),
    "ctld a word after node is no node": (
        "slurm", STAMP + "error: Node configuration differs from hardware: CPUs=4:8(hw)",
        "slurm_config_error", {"node": None}, {}),
    "slurmd launch task 20.02": (
        "slurm", STAMP + "launch task 63532.0 request from UID:1000 GID:1000 HOST:10.1.2.3 PORT:63195",
        "log", {"job_id": "63532"}, {}),
    "stepd step failed": (
        "nccl", "slurmstepd: error: *** STEP 5001.0 ON gpu001 FAILED (non-zero exit code or other failure mode) ***",
        "slurm_job_cancelled", {"job_id": "5001", "node": "gpu001"}, {"reason": "FAILED", "step": "0"}),
    "stepd oom 17.x step": (
        "nccl", "slurmstepd: error: Detected 2 oom-kill event(s) in step 3756240.batch cgroup.",
        "slurm_oom", {"job_id": "3756240"}, {"count": "2", "step": "batch"}),
    "stepd oom 22.05+": (
        "nccl", "slurmstepd: error: Detected 3 oom_kill events in StepId=1943824.0. Some of the step tasks have been OOM Killed.",
        "slurm_oom", {"job_id": "1943824"}, {"count": "3", "step": "0"}),
    "srun task exited": (
        "nccl", "srun: error: gpu003: task 12: Exited with exit code 1",
        "slurm_task_exit", {"node": "gpu003", "code": 1, "severity": "err", "program": "srun"}, {"tasks": "12"}),
    "srun tasks killed": (
        "nccl", "srun: error: frontier07200: tasks 0-7: Killed",
        "slurm_task_exit", {"node": "frontier07200"}, {"tasks": "0-7", "signal": "Killed"}),
    "srun task aborted core": (
        "nccl", "srun: error: frontier07210: task 13: Aborted (core dumped)",
        "slurm_task_exit", {"node": "frontier07210"}, {"tasks": "13", "signal": "Aborted"}),
    "srun node failure": (
        "nccl", "srun: error: Node failure on gpu17", "slurm_node_down", {"node": "gpu17"}, {"state": "NODE_FAIL"}),
    # NCCL socket.cc/socket.h: a recv from a peer failing (2.7-2.13 "Net : ", 2.14+ "socketProgressOpt: ")
    "net error recv from peer 2.14+": (
        "nccl", "gpu01:1234:1300 [0] misc/socket.cc:566 NCCL WARN socketProgressOpt: Call to recv from 10.200.84.247<46391> "
        "failed : Connection reset by peer",
        "nccl_net_error", {"node": "gpu01", "pid": 1234}, {"peer": "10.200.84.247", "peer_port": "46391"}),
    "net error recv from peer 2.7-2.13": (
        "nccl", "gpu01:1234:1300 [0] include/socket.h:423 NCCL WARN Net : Call to recv from 10.1.4.1<43521> failed : "
        "Connection timed out",
        "nccl_net_error", {"node": "gpu01"}, {"peer": "10.1.4.1"}),
    # NCCL 2.0-2.3 debug.h: "%s:%d:%d [%d] INFO " (no "NCCL"), busId as int64ToBusId's int
    "nccl 2.0-2.3 INFO header": (
        "nccl", "seyun:17280:17553 [0] INFO comm 0x7f3c58002f50 rank 3 nranks 16 cudaDev 3 busId e7000 - Init COMPLETE",
        "nccl_comm_init", {"node": "seyun", "pid": 17280, "rank": 3, "gpu": "0000:e7:00"}, {"bus_id": "e7000"}),
    "comm init busId to PCI id": (
        "nccl", "n1:4242:4300 [7] NCCL INFO ncclCommInitRank comm 0x55d684f276f1 rank 7 nranks 32 cudaDev 7 nvmlDev 7 "
        "busId 1000db000 commId 0x2eb03d0ead3e7e5d - Init COMPLETE",
        "nccl_comm_init", {"gpu": "1000:db:00", "rank": 7}, {}),
    # ProcessGroupNCCL WorkNCCL operator<< with TensorShape (v1.8-v1.12)
    "timeout v1.8-1.12 TensorShape": (
        "nccl", "[E ProcessGroupNCCL.cpp:587] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=49, "
        "OpType=ALLREDUCE, TensorShape=[1024], Timeout(ms)=18000000) ran for 18000564 milliseconds before timing out.",
        "nccl_timeout", {"rank": 0}, {"seq": "49", "op": "ALLREDUCE", "timeout_ms": "18000000"}),
    # WorkNCCL::checkAndSetException: the async NCCL error of a collective; code from ncclGetErrorString's text
    "async exception of a collective": (
        "nccl", "[rank0]:[E ProcessGroupNCCL.cpp:542] [Rank 0] Collective WorkNCCL(SeqNum=2, OpType=ALLREDUCE, "
        "NumelIn=1, NumelOut=1, Timeout(ms)=1000000) raised the following async exception: NCCL error: unhandled system "
        "error (run with NCCL_DEBUG=INFO for details), NCCL version 2.18.1",
        "nccl_error", {"rank": 0, "code": 2}, {"seq": "2", "op": "ALLREDUCE", "timeout_ms": "1000000"}),
    # C10D_NCCL_CHECK's text: the result code from ncclGetErrorString's wording, the detail lines joined
    "NCCL error in: code from text, detail joined": (
        "nccl", "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, "
        "remote process exited or there was a network error, NCCL version 2.20.5\n"
        "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.\n"
        "Last error:",
        "nccl_error", {"code": 6}, {}),
    "NCCL error in: cuda error": (
        "nccl", "RuntimeError: NCCL error in: /pytorch/torch/lib/c10d/ProcessGroupNCCL.cpp:514, unhandled cuda error",
        "nccl_error", {"code": 1}, {}),
    # torch/csrc/cuda/nccl.cpp throw_nccl_error: "NCCL Error " << status << ": " << ncclGetErrorString
    "torch.cuda.nccl NCCL Error N": (
        "nccl", "RuntimeError: NCCL Error 2: unhandled system error", "nccl_error", {"code": 2}, {}),
    # NCCLUtils.cpp getNcclErrorDetailStr on a line of its own (a launcher label before it)
    "nccl result detail line": (
        "nccl", "[rank1]: ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error. ",
        "nccl_error", {"code": 2, "rank": 1}, {"result": "ncclSystemError"}),
    # torch/_logging TorchLogsFormatter (v2.2+): "%s%s%s.%06d %s %s:%s]" glog-like, no brackets
    "elastic agent torch._logging layout": (
        "nccl", "E1211 08:26:06.844000 139773546530624 torch/distributed/elastic/multiprocessing/api.py:833] failed "
        "(exitcode: 1) local_rank: 1 (pid: 6833) of binary: /opt/conda/envs/myenv/bin/python",
        "torch_elastic_failed", {"code": 1, "pid": 6833, "program": "torch",
                                 "message": "[torch/distributed/elastic/multiprocessing/api.py:833] failed (exitcode: 1) "
                                            "local_rank: 1 (pid: 6833) of binary: /opt/conda/envs/myenv/bin/python"}, {}),
    # logging.BASIC_FORMAT "%(levelname)s:%(name)s:%(message)s"
    "elastic agent logging basicConfig": (
        "nccl", "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 0 (pid: 333202) of "
        "binary: /usr/bin/python3",
        "torch_elastic_failed", {"code": -9, "pid": 333202, "severity": "err",
                                 "message": "failed (exitcode: -9) local_rank: 0 (pid: 333202) of binary: /usr/bin/python3"},
        {}),
    # NVIDIA/nccl net_ib.cc ncclIbAsyncThreadMain WARN("NET/IB : Got async event : %s", str)
    "ib async event": (
        "nccl", "gpu01:815:864 [0] transport/net_ib.cc:80 NCCL WARN NET/IB : Got async event : local catastrophic error",
        "nccl_net_error", {"node": "gpu01", "pid": 815}, {"event": "local catastrophic error"}),
    # aws-ofi-nccl NCCL_OFI_WARN("Request %p completed with error. RC: %d. Error: %d (%s). Completed length: %ld, ...")
    "ofi request completed with error": (
        "nccl", "[rank3]: NET/OFI Request 0x7f14cc5b60c0 completed with error. RC: 113. Error: 2 (UNDELIVERABLE). Completed length: 0",
        "nccl_net_error", {"rank": 3, "code": 113}, {"prov_errno": "2", "detail": "UNDELIVERABLE"}),
    # NVIDIA/nccl init.cu 2.1-2.3 commAlloc INFO(NCCL_INIT,"comm %p rank %d nranks %d", comm, rank, ndev)
    "comm init 2.3": (
        "nccl", "ta1-1:2712:2824 [0] NCCL INFO comm 0x7fa94834c010 rank 1 nranks 2",
        "nccl_comm_init", {"rank": 1, "node": "ta1-1"}, {"nranks": "2"}),
    # ProcessGroupNCCL.cpp v2.3-v2.4 c10::str(logPrefix(), "Timeout at NCCL work: ", seq, ", last enqueued NCCL work: ", ...)
    "watchdog timeout at work v2.3": (
        "nccl", "[rank1]:[E ProcessGroupNCCL.cpp:1537] [PG 1 Rank 1] Timeout at NCCL work: 158046, last enqueued NCCL work: "
        "158046, last completed NCCL work: 158045.",
        "nccl_watchdog", {"rank": 1}, {"seq": "158046", "last_completed": "158045"}),
    # c10/cuda/CUDACachingAllocator.cpp "CUDA out of memory. Tried to allocate " (the exception's class name varies)
    "cuda oom bare class": (
        "nccl", "OutOfMemoryError: CUDA out of memory. Tried to allocate 1.71 GiB (GPU 0; 6.00 GiB total capacity)",
        "cuda_oom", {}, {}),
    "cuda oom text only": (
        "nccl", "...CUDA out of memory. Tried to allocate 30.29 GiB. GPU 0 has a total capacity of 10.74 GiB",
        "cuda_oom", {}, {}),
    # cpython traceback.py "%s: %s" for the builtin Exception class
    "python bare Exception": (
        "nccl", "Exception: expected value at line 1 column 1", "python_exception", {}, {"exception": "Exception"}),
    # slurm step_launch.c error("Task launch for %u.%u failed on node %s: %m") / "%ps" (20.11+)
    "srun task launch failed": (
        "slurm", "srun: error: Task launch for 36.0 failed on node cn131: Job credential expired",
        "log", {"job_id": "36", "node": "cn131", "program": "srun"}, {}),
    "srun task launch failed 20.11": (
        "slurm", "srun: error: Task launch for StepId=125452.4 failed on node gpu07: Unable to layout tasks on given cpus",
        "log", {"job_id": "125452", "node": "gpu07"}, {}),
    # slurm node_mgr.c debug("Node %s has low real_memory size (%u < %u)") with log.c's "debug:  " prefix
    "slurmctld low real_memory debug": (
        "slurm", STAMP + "debug:  Node hb120v2-2 has low real_memory size (435161 < 443596)",
        "slurm_config_error", {"node": "hb120v2-2"}, {}),
    # slurm sinfo default format "%#P %.5a %.10l %.6D %.6t %N"
    "sinfo default row fail": (
        "slurm", "cpu          up 7-00:00:00      1  fail* f005", "slurm_node_down", {"node": "f005"}, {"state": "fail*"}),
    "sinfo default row draining range": (
        "slurm", "cpu          up 7-00:00:00     55  drng@ d[001-032],f[001-004,006-024]", "slurm_node_drain", {"node": None},
        {"state": "drng@", "partition": "cpu"}),
    # slurmd req.c _rpc_batch_job
    "slurmd batch job launch": (
        "slurm", STAMP + "Launching batch job 63532 for UID 1000", "slurm_job_start", {"job_id": "63532"}, {"uid": "1000"}),
    # slurmctld node_mgr.c 17.02-20.02 validate_node_specs: error ("Setting node %s state to DRAIN", reg_msg->node_name)
    "slurmctld registration drain": (
        "slurm", STAMP + "error: Setting node ip-10-2-1-120 state to DRAIN", "slurm_node_drain",
        {"node": "ip-10-2-1-120"}, {"state": "DRAIN"}),
    # slurmd.c main: error( "slurmd initialization failed" ); exit(1), in slurmd.log and on stderr
    "slurmd initialization failed log file": (
        "slurm", STAMP + "error: slurmd initialization failed", "slurm_daemon_fatal", {}, {"init": "slurmd initialization failed"}),
    "slurmd initialization failed stderr": (
        "slurm", "slurmd: error: slurmd initialization failed", "slurm_daemon_fatal", {"program": "slurmd"}, {}),
    # slurmstepd mgr.c _log_task_exit: verbose("task %lu (%lu) exited with exit code %d.", ...) and
    # verbose("task %lu (%lu) exited. Killed by signal %d%s.", ...), in slurmd.log with the step prefix "[%ps] "
    "slurmstepd task exit code": (
        "slurm", STAMP + "[15.0] task 0 (12064) exited with exit code 1.", "slurm_task_exit",
        {"job_id": "15", "pid": 12064, "code": 1}, {"tasks": "0"}),
    "slurmstepd task killed by signal": (
        "slurm", STAMP + "[15.0] task 3 (12067) exited. Killed by signal 9.", "slurm_task_exit",
        {"job_id": "15", "pid": 12067}, {"signal": "9"}),
    # slurm forward.c: error("%s: can't find address for host %s, check slurm.conf", __func__, name): the node named
    "srun forward cannot resolve node": (
        "slurm", "srun: error: fwd_tree_thread: can't find address for host ip-172-31-7-136, check slurm.conf",
        "log", {"node": "ip-172-31-7-136", "program": "srun"}, {}),
    # slurmstepd mgr.c: error("container_g_join failed: %u", job->step_id.job_id)
    "slurmstepd container join failed": (
        "slurm", "slurmstepd: error: container_g_join failed: 119383", "log", {"job_id": "119383", "program": "slurmstepd"}, {}),
    # docker/compose cmd/formatter/logs.go setPrefix: fmt.Sprintf("%-"+width+"s | ", name) before the daemon's line
    "docker compose prefix before slurmd log line": (
        "slurm", "slurm-mail-el8-23.11.8-compute  | [2025-04-21T10:57:14.247] error: slurmd initialization failed",
        "slurm_daemon_fatal", {"message": "error: slurmd initialization failed"}, {}),
}


def test_slurmstepd_clean_task_exit_is_no_event(tmp_path: Path) -> None:
    """mgr.c logs every reaped task; exit code 0 is the normal end, not a task failure."""
    path = tmp_path / "input.log"
    path.write_text(STAMP + "[15.0] task 0 (12064) exited with exit code 0.\n")
    assert parse_file(path, "slurm").get_column("kind").to_list() == ["log"]


def test_docker_compose_prefix_keeps_the_stamp(tmp_path: Path) -> None:
    """logs.go pads the service name to the widest plus one, then " | ": the daemon's own stamp follows."""
    path = tmp_path / "input.log"
    path.write_text("c1  | [2025-04-21T10:57:14.247] error: cannot find cgroup plugin for cgroup/v2\n"
                    "slurmctld-long-name | [2025-04-21T10:57:15.000] Running as primary controller\n")
    rows = parse_file(path, "slurm").to_dicts()
    assert [r["ts"].strftime("%Y-%m-%dT%H:%M:%S.%f")[:23] for r in rows] == ["2025-04-21T10:57:14.247", "2025-04-21T10:57:15.000"]
    assert [r["message"] for r in rows] == ["error: cannot find cgroup plugin for cgroup/v2", "Running as primary controller"]


def test_ray_reset_remnant_before_nccl_prefix(tmp_path: Path) -> None:
    """ray worker.py print_worker_logs: "{DIM}{color}({prefix}{pid}){RESET_ALL} {line}"; a paste that lost the
    "(pid=N)" label keeps "[0m " (RESET_ALL without its ESC) before NCCL's host:pid:tid prefix."""
    path = tmp_path / "out.log"
    path.write_text("[0m ip-172-31-0-137:14605:14673 [0] misc/ibvwrap.cc:63 NCCL WARN Failed to open libibverbs.so[.1]\n"
                    "\x1b[0m ip-172-31-0-137:14605:14688 [0] NCCL INFO Channel 00/04 :    0   1\n")
    rows = parse_file(path, "nccl").to_dicts()
    assert [(r["node"], r["pid"]) for r in rows] == [("ip-172-31-0-137", 14605)] * 2
    assert rows[0]["kind"] == "nccl_warn"
    assert rows[0]["message"] == "misc/ibvwrap.cc:63 NCCL WARN Failed to open libibverbs.so[.1]"
    assert rows[1]["message"] == "NCCL INFO Channel 00/04 :    0   1"


def test_agent_closing_signal_names_the_worker(tmp_path: Path) -> None:
    """api.py: logger.warning("Sending process %s closing signal %s", pid, sig): pid is the worker."""
    path = tmp_path / "out.log"
    path.write_text("W1211 08:26:06.780000 139773546530624 torch/distributed/elastic/multiprocessing/api.py:858] "
                    "Sending process 6832 closing signal SIGTERM\n"
                    "WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 153929 closing signal SIGTERM\n")
    rows = parse_file(path, "nccl").to_dicts()
    assert [r["pid"] for r in rows] == [6832, 153929]
    assert rows[0]["message"].startswith("[torch/distributed/elastic/multiprocessing/api.py:858] Sending process")
    assert rows[1]["message"] == "Sending process 153929 closing signal SIGTERM"


def test_the_launchers_global_rank_beats_a_process_groups_rank(tmp_path: Path) -> None:
    """``[rank218]:`` is the global rank torchrun labels the line with; ``[PG 3 Rank 13]`` is the
    rank inside process group 3 (ProcessGroupNCCL's logPrefix): placing the rank by the second
    would blame another node."""
    line = ("[rank218]:[E1120 12:43:44.648932000 ProcessGroupNCCL.cpp:616] [PG 3 Rank 13] Watchdog caught collective "
            "operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=5, NumelOut=5, Timeout(ms)=600000) ran for "
            "600041 milliseconds before timing out.")
    assert _event(tmp_path, "nccl", line, "nccl_timeout")["rank"] == 218


def _event(tmp_path: Path, collector: str, text: str, kind: str) -> dict:
    path = tmp_path / "input.log"
    path.write_text(text + "\n")
    out = parse_file(path, collector)
    rows = [r for r in out.iter_rows(named=True) if r["kind"] == kind]
    assert len(rows) == 1, (kind, out.select("kind", "message").rows())
    return rows[0]


@pytest.mark.parametrize("case", sorted(CASES))
def test_cited_wording_parses(tmp_path: Path, case: str) -> None:
    collector, text, kind, fields, attrs = CASES[case]
    row = _event(tmp_path, collector, text, kind)
    got_attrs = json.loads(row["attrs"]) if row["attrs"] else {}
    assert {k: row[k] for k in fields} == fields
    assert {k: got_attrs.get(k) for k in attrs} == attrs


def test_elastic_other_failures_are_not_the_root_cause(tmp_path: Path) -> None:
    """Only the root failure gives an event: the "Failures:" block's rank 9 does not."""
    collector, text, kind, _, _ = CASES["elastic root cause v1.10+"]
    row = _event(tmp_path, collector, text, kind)
    assert row["rank"] == 8 and "rank      : 9" not in row["raw"]


@pytest.mark.parametrize("name", ["nccl.toml", "slurm.toml"])
def test_every_rule_cites_its_emitter(name: str) -> None:
    doc = tomllib.loads((BUILTIN_DIR / name).read_text())
    for rule in doc["rule"]:
        assert rule.get("cite"), rule["kind"]
        for c in rule["cite"]:
            if c.startswith("closed-source "):  # a vendor's binary: its shipped header or documented strings
                assert ": " in c, c
                continue
            repo, path, version, *_ = c.split(" ", 3)
            assert "/" in repo and "/" in path and version and ": " in c, c
