-- Argo CD health of a TritonLLMDeployment (tritonllm.io/v1alpha1), read from the conditions
-- the operator writes (docs/operator.md, "Status"):
--   Degraded=True                      -> Degraded    "<reason>: <message>"
--   Progressing=True                   -> Progressing "<reason>: <message>" (Building, RollingOut...)
--   deployed with zero replicas        -> Suspended   (status.reason ScaledToZero)
--   Progressing=False/Deployed and
--   Available=True                     -> Healthy     "<ready> replicas ready"
--   no status yet, or a generation the operator has not acted on -> Progressing
local hs = {}

local function find(conditions, wanted)
  if conditions == nil then
    return nil
  end
  for _, c in ipairs(conditions) do
    if c.type == wanted then
      return c
    end
  end
  return nil
end

local function describe(c)
  if c.message ~= nil and c.message ~= "" then
    return c.reason .. ": " .. c.message
  end
  return c.reason
end

local status = obj.status
if status == nil or status.conditions == nil or #status.conditions == 0 then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to report a status"
  return hs
end

local generation = obj.metadata.generation
if generation ~= nil and (status.observedGeneration == nil or status.observedGeneration < generation) then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to act on generation " .. generation
  return hs
end

local degraded = find(status.conditions, "Degraded")
if degraded ~= nil and degraded.status == "True" then
  hs.status = "Degraded"
  hs.message = describe(degraded)
  return hs
end

local progressing = find(status.conditions, "Progressing")
if progressing ~= nil and progressing.status == "True" then
  hs.status = "Progressing"
  hs.message = describe(progressing)
  return hs
end

if progressing ~= nil and progressing.status == "False" and progressing.reason ~= "Deployed" then
  -- stuck: the operator stopped for a reason a human must act on
  hs.status = "Degraded"
  hs.message = describe(progressing)
  return hs
end

if status.reason == "ScaledToZero" then
  hs.status = "Suspended"
  hs.message = "Scaled to zero replicas"
  return hs
end

local available = find(status.conditions, "Available")
if progressing ~= nil and available ~= nil and available.status == "True" then
  hs.status = "Healthy"
  hs.message = (status.ready or "") .. " replicas ready"
  return hs
end

hs.status = "Progressing"
if available ~= nil then
  hs.message = describe(available)
else
  hs.message = "Waiting for the serving replicas"
end
return hs
