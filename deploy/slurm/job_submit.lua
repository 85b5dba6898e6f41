--[[
Fairshare's job_submit plugin for Slurm: `sbatch`, `srun` and `salloc` into Fairshare's
partitions, as users already type them.

Install it as /etc/slurm/job_submit.lua (next to slurm.conf) with `JobSubmitPlugins=lua`, then
restart slurmctld; deploy/slurm/README.md says more. Written for Slurm 22.05's job_submit/lua,
which runs it inside slurmctld with Lua 5.1, as SlurmUser, on every submission and every update
of a job.

Why a plugin: Fairshare decides what runs where and when; Slurm executes. A job a user gives
Slurm directly would otherwise start as soon as Slurm sees free GPUs, before Fairshare has
charged anyone for it. So a job sent to one of Fairshare's partitions is checked at submission
(an account bound to a budget, GPUs asked, no more than the pool has) and kept held
(priority 0) until Fairshare's Slurm agent releases it where and when Fairshare decides. A
refusal happens at `sbatch`, on the user's terminal, while they can still fix the command,
rather than as a job that waits forever.

What the plugin knows comes from one file, the bindings file, which Fairshare's Slurm agent
writes (atomically) whenever its view changes: which partitions are Fairshare's, the Fairshare
cluster's name, the uids the agent submits as, the pool's size and which Slurm accounts are bound
to which budgets. The file is read again on every call, so a binding counts at the next
submission, with no restart and no network call from inside slurmctld (a slow answer there would
stall every RPC of the controller). Its format, one setting per line, `#` starts a comment:

    cluster=hpc                       the Fairshare cluster this Slurm is
    partition=gpu                     a partition Fairshare schedules (one line each)
    largest_node_gpus=8               GPUs of the pool's largest node
    pool_gpus=16                      GPUs of the whole pool
    agent_uid=0                       a uid the agent submits and releases as (one line each)
    account=vision budget=lab/vision  a Slurm account bound to a budget (one line each)

Lines of other keys are ignored, so that a newer agent can add some.
]]

-- The bindings file. Nothing else configures the plugin.
local BINDINGS = "/etc/slurm/fairshare-bindings"

-- Slurm's "not given" for numbers (job_desc fields a command line did not set).
local NO_VAL = slurm.NO_VAL or 4294967294
local NO_VAL16 = slurm.NO_VAL16 or 65534

-- Everyone may use Slurm's own commands on jobs of other partitions; on Fairshare's these are
-- the fields a job's owner may not change (see slurm_job_modify).
local GUARDED = "priority (hold, release), requeue, partition, account"

-- The bindings file as a table, or nil when it cannot be opened. A read error past the open
-- raises, and is refused by the pcall around the caller.
local function read_bindings()
  local file = io.open(BINDINGS, "r")
  if file == nil then
    return nil
  end
  local b = { partitions = {}, agent_uids = {}, accounts = {} }
  for line in file:lines() do
    local fields, kind = {}, nil
    for token in line:gsub("#.*$", ""):gmatch("%S+") do
      local key, value = token:match("^([^=]+)=(.*)$")
      if key ~= nil then
        fields[key] = value
        kind = kind or key
      end
    end
    local value = kind and fields[kind]
    if kind == "cluster" and value ~= "" then
      b.cluster = value
    elseif kind == "partition" and value ~= "" then
      b.partitions[value] = true
    elseif kind == "agent_uid" and tonumber(value) then
      b.agent_uids[tonumber(value)] = true
    elseif kind == "pool_gpus" then
      b.pool_gpus = tonumber(value)
    elseif kind == "largest_node_gpus" then
      b.largest_node_gpus = tonumber(value)
    elseif kind == "account" and value ~= "" and (fields.budget or "") ~= "" then
      -- Slurm lower-cases the accounts it stores, whatever case the user typed.
      b.accounts[value:lower()] = fields.budget
    end
  end
  file:close()
  return b
end

-- The partitions a job goes to: its comma-separated list, or Slurm's default partition when
-- it names none (job_desc.partition is nil then: Slurm fills the default in after the plugin).
local function partitions_of(named, part_list)
  local list = {}
  if named == nil or named == "" then
    for name, part in pairs(part_list or {}) do
      if part.flag_default == 1 then
        list[1] = part.name or name
      end
    end
  else
    for name in named:gmatch("[^,]+") do
      list[#list + 1] = name
    end
  end
  return list
end

-- Whether any of the comma-separated partitions is Fairshare's. Without the bindings file
-- nobody knows which are: every partition counts (fail closed).
local function names_ours(named, b)
  if named == nil then
    return false
  end
  for name in named:gmatch("[^,]+") do
    if b == nil or b.partitions[name] then
      return true
    end
  end
  return false
end

-- GPUs in a TRES string: "gres:gpu:2", "gres:gpu:a100:2" (typed), "gres:gpu" (one), possibly
-- among other GRES in a comma list. --gres and --gpus-per-node give tres_per_node, --gpus gives
-- tres_per_job.
local function gpus_in(tres)
  local total = 0
  for item in (tres or ""):gmatch("[^,]+") do
    if item == "gres:gpu" or item:match("^gres:gpu:") then
      total = total + (tonumber(item:match(":(%d+)$")) or 1)
    end
  end
  return total
end

-- The agent names its jobs <workload>+<attempt>+<cluster> (ids never contain "+"); the cluster
-- is compared as plain text, since a name like "hpc-2" would be a pattern to Lua.
local function agent_style(name, cluster)
  if name == nil or cluster == nil then
    return false
  end
  local suffix = "+" .. cluster
  if #name <= #suffix or name:sub(-#suffix) ~= suffix then
    return false
  end
  return name:sub(1, #name - #suffix):match("^.+%+[0-9]+$") ~= nil
end

local function refuse(code, ...)
  slurm.log_user(...)
  return code
end

local function submit(job_desc, part_list, submit_uid)
  local b = read_bindings()
  if b == nil then
    -- Without the file the plugin cannot tell Fairshare's partitions from others, nor a bound
    -- account from an unbound one: refusing everything is the only safe answer. Letting jobs
    -- through would start them in Fairshare's partitions unheld and uncharged.
    return refuse(slurm.ERROR,
      "fairshare: cannot read %s, which the Fairshare Slurm agent keeps; jobs are refused until it is back (is the agent running? ask this cluster's administrators)",
      BINDINGS)
  end

  local ours, others = {}, {}
  for _, name in ipairs(partitions_of(job_desc.partition, part_list)) do
    if b.partitions[name] then
      ours[#ours + 1] = name
    else
      others[#others + 1] = name
    end
  end
  if #ours == 0 then
    return slurm.SUCCESS -- not Fairshare's: Slurm's own rules only
  end
  local partition = table.concat(ours, ",")
  local cluster = b.cluster or "?"
  if #others > 0 then
    -- Held for Fairshare in one partition, it would be held in the others too, and one
    -- released by Fairshare could start in a partition Fairshare did not choose.
    return refuse(slurm.ERROR,
      "fairshare: partition %s is scheduled by Fairshare: submit to it alone, not together with %s",
      partition, table.concat(others, ","))
  end

  local agent = b.agent_uids[submit_uid] == true
  if agent_style(job_desc.name, b.cluster) then
    if agent then
      -- The agent's own runs: Fairshare already decided them (placement, --no-requeue), and
      -- they must start at once. Passed unchanged.
      return slurm.SUCCESS
    end
    -- The agent finds its runs by name: a user's job with such a name would pass for one.
    return refuse(slurm.ERROR,
      "fairshare: job names <workload>+<attempt>+%s are those of Fairshare's agent; choose another --job-name",
      cluster)
  end

  local account = job_desc.account -- nil without --account
  if account == nil or account == "" then
    return refuse(slurm.ESLURM_INVALID_ACCOUNT,
      "fairshare: jobs on partition %s are charged to a budget through their account: submit with --account=<account>, an account bound to a budget on cluster %s (a budget's manager binds one: fairshare budgets bind-account <budget> --cluster %s --account <account>)",
      partition, cluster, cluster)
  end
  local budget = b.accounts[account:lower()]
  if budget == nil then
    return refuse(slurm.ESLURM_INVALID_ACCOUNT,
      "fairshare: account '%s' is bound to no budget on cluster %s; a budget's manager binds it: fairshare budgets bind-account <budget> --cluster %s --account %s",
      account, cluster, cluster, account)
  end

  local per_node = gpus_in(job_desc.tres_per_node)
  local per_job = gpus_in(job_desc.tres_per_job)
  if per_node == 0 and per_job == 0 then
    return refuse(slurm.ERROR,
      "fairshare: partition %s runs GPU work: ask --gres=gpu:N or --gpus=N", partition)
  end
  local nodes = job_desc.min_nodes
  if nodes == nil or nodes == NO_VAL or nodes < 1 then
    nodes = 1
  end
  local total = math.max(per_node * nodes, per_job)
  if b.pool_gpus ~= nil and total > b.pool_gpus then
    return refuse(slurm.ERROR,
      "fairshare: the job asks %s GPUs, more than the %s GPUs of Fairshare's pool on cluster %s",
      tostring(total), tostring(b.pool_gpus), cluster)
  end
  if b.largest_node_gpus ~= nil and per_node > b.largest_node_gpus then
    return refuse(slurm.ERROR,
      "fairshare: the job asks %s GPUs per node, more than the %s of the largest node on cluster %s",
      tostring(per_node), tostring(b.largest_node_gpus), cluster)
  end

  -- Held: Slurm shows Reason=JobHeldUser, and slurm_job_modify keeps the owner from releasing
  -- it. Requeueable: slurm.conf has JobRequeue=0 (Slurm never requeues on its own), but
  -- Fairshare preempts by requeueing this job once it runs.
  job_desc.priority = 0
  job_desc.requeue = 1
  slurm.log_info(
    "fairshare: held a job of uid %s (%s) on %s: account=%s budget=%s gpus=%s (per node %s x %s nodes, per job %s)",
    tostring(submit_uid), tostring(job_desc.user_name), partition, account, budget,
    tostring(total), tostring(per_node), tostring(nodes), tostring(per_job))
  slurm.log_user("fairshare: held for Fairshare, charged to budget %s; it starts when Fairshare places it",
    budget)
  return slurm.SUCCESS
end

function slurm_job_submit(job_desc, part_list, submit_uid)
  local ok, rc = pcall(submit, job_desc, part_list, submit_uid)
  if ok then
    return rc
  end
  -- job_submit/lua lets a job through when the script raises: a bug here must refuse instead.
  slurm.log_error("fairshare: job_submit.lua failed, job refused: %s", tostring(rc))
  slurm.log_user("fairshare: the Fairshare job_submit plugin failed (%s); the job is refused, tell this cluster's administrators",
    tostring(rc))
  return slurm.ERROR
end

-- A job submitted with priority 0 is JobHeldUser: its owner could `scontrol release` it and
-- start it without Fairshare. Here only root and the agent's uids may release it, change its
-- requeue flag, or move it between partitions or accounts (into Fairshare's partitions too,
-- which would skip slurm_job_submit's checks); others get "Access/permission denied" (22.05
-- shows no log_user message for updates).
local function modify(job_desc, job_rec, part_list, modify_uid)
  local b = read_bindings()
  if b ~= nil and b.agent_uids[modify_uid] then
    return slurm.SUCCESS
  end
  if not (names_ours(job_rec.partition, b) or names_ours(job_desc.partition, b)) then
    return slurm.SUCCESS
  end
  local changes = (job_desc.priority ~= nil and job_desc.priority ~= NO_VAL)
    or (job_desc.requeue ~= nil and job_desc.requeue ~= NO_VAL16)
    or (job_desc.partition ~= nil)
    or (job_desc.account ~= nil)
    or (b ~= nil and agent_style(job_desc.name, b.cluster))
  if changes then
    slurm.log_info("fairshare: job %s is on Fairshare's partition: uid %s may not change its %s",
      tostring(job_rec.job_id), tostring(modify_uid), GUARDED)
    return slurm.ESLURM_ACCESS_DENIED
  end
  return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
  if modify_uid == 0 then
    return slurm.SUCCESS -- root (SlurmUser here) administers the cluster
  end
  local ok, rc = pcall(modify, job_desc, job_rec, part_list, modify_uid)
  if ok then
    return rc
  end
  slurm.log_error("fairshare: job_submit.lua failed on an update, denied: %s", tostring(rc))
  return slurm.ESLURM_ACCESS_DENIED
end

slurm.log_info("fairshare: job_submit.lua loaded, bindings from %s", BINDINGS)
return slurm.SUCCESS
