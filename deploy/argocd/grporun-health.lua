-- Argo CD health check for grpo.dev/GRPORun (Lua 5.1, as Argo CD runs it). Install it with argocd-cm.yaml.
--   Pending, Provisioning, Running           -> Progressing (Degraded if the Healthy condition is False)
--   Succeeded                                 -> Healthy
--   Failed                                    -> Degraded
--   Suspended (spec.suspend: true, observed)  -> Suspended
-- A spec change the operator has not observed yet (status.observedGeneration < metadata.generation) reads
-- Progressing, so a sync does not look settled before the operator has acted on it.
local hs = {status = "Progressing", message = "Waiting for the grpo-operator to report a status"}
if obj.status == nil or obj.status.phase == nil then
  return hs
end
local st = obj.status
local conditions = {}
if st.conditions ~= nil then
  for _, c in ipairs(st.conditions) do
    conditions[c.type] = c
  end
end
local function describe(reason, message)
  local text = ""
  if reason ~= nil and reason ~= "" then text = reason end
  if message ~= nil and message ~= "" then
    if text ~= "" then text = text .. ": " end
    text = text .. message
  end
  return text
end
local detail = describe(st.reason, st.message)

-- Terminal phases are final: the operator does not act on later spec edits of a finished run.
if st.phase == "Failed" then
  return {status = "Degraded", message = detail}
end
if st.phase == "Succeeded" then
  local text = "Succeeded"
  if st.progress ~= nil then text = text .. ": " .. st.progress .. " rollouts" end
  return {status = "Healthy", message = text}
end

local generation = obj.metadata and obj.metadata.generation
if generation ~= nil and st.observedGeneration ~= nil and st.observedGeneration < generation then
  hs.message = "Spec generation " .. tostring(generation) .. " not yet observed by the grpo-operator (status is for "
    .. tostring(st.observedGeneration) .. ")"
  return hs
end

if st.phase == "Suspended" then
  return {status = "Suspended", message = detail}
end

local healthy = conditions["Healthy"]
if healthy ~= nil and healthy.status == "False" then
  return {status = "Degraded", message = describe(healthy.reason, healthy.message)}
end

if st.phase == "Pending" or st.phase == "Provisioning" or st.phase == "Running" then
  if st.reason == nil or st.reason == st.phase then
    hs.message = describe(st.phase, st.message)
  else
    hs.message = st.phase .. " (" .. detail .. ")"
  end
  return hs
end

hs.message = "Unknown phase " .. tostring(st.phase)
return hs
